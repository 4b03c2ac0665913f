"""The error budget: on_error="skip", max_errors, and the manifest of skipped calls (loader.errors, error_log)."""

import json

import pytest

from parallel_loader import DataLoader, Train, YieldFunction
from parallel_loader._faults.errors import ErrorBudgetExceeded
from tests.helpers import Faulty


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
def test_skip_leaves_out_failed_batches_and_delivers_the_others_once(ordered, threads):
    fn = Faulty(40, fail={0: ValueError, 17: KeyError, 39: OSError})
    with DataLoader(fn, num_threads=threads, max_len=2, ordered=ordered, on_error="skip") as loader:
        got = list(loader)
        again = list(loader)
    expected = [i for i in range(40) if i not in (0, 17, 39)]
    assert sorted(got) == sorted(again) == expected
    if ordered:
        assert got == again == expected
    records = sorted(loader.errors, key=lambda r: (r.epoch, r.index))
    assert [(r.epoch, r.index, r.type, r.message) for r in records] == [
        (epoch, index, kind, message)
        for epoch in (0, 1)
        for index, kind, message in (
            (0, "ValueError", "bad 0"),
            (17, "KeyError", "'bad 17'"),
            (39, "OSError", "bad 39"),
        )
    ]
    assert all(r.thread.startswith("DataLoader-") and "bad" in r.traceback for r in records)


def test_skipping_a_shuffled_epoch_leaves_out_the_failed_indices_only():
    fn = Faulty(30, fail={4: ValueError, 5: ValueError})
    with DataLoader(fn, num_threads=2, shuffle=True, seed=1, ordered=True, on_error="skip") as loader:
        got = list(loader)
    assert sorted(got) == [i for i in range(30) if i not in (4, 5)]
    assert sorted(r.index for r in loader.errors) == [4, 5]


def test_a_stream_skips_its_failed_calls_too():
    calls = iter(range(10))

    def stream():
        i = next(calls)  # StopIteration ends the stream
        if i % 4 == 1:
            raise ValueError(f"bad call {i}")
        return i

    with DataLoader(stream, num_threads=1, on_error="skip") as loader:
        got = list(loader)
    assert got == [0, 2, 3, 4, 6, 7, 8]
    assert [(r.index, r.message) for r in loader.errors] == [
        (None, "bad call 1"),
        (None, "bad call 5"),
        (None, "bad call 9"),
    ]


class WithContext(YieldFunction):
    """Fails at index 2 with an exception carrying context, at 3 with one naming a path; says what each index is."""

    def __len__(self):
        return 6

    def __call__(self, index):
        if index == 2:
            error = RuntimeError("broken stream")
            error.context = {"offset": 128}
            raise error
        if index == 3:
            error = OSError("cannot read")
            error.path = "/data/clip3.avi"
            raise error
        if index == 4:
            raise ValueError("no context from the function for this one")
        return index

    def error_context(self, index):
        if index == 4:
            raise LookupError("the description itself failed")
        return {"source": f"shard-{index}"}


def test_a_record_has_the_context_of_the_exception_and_of_the_yield_function():
    with DataLoader(WithContext(), num_threads=2, on_error="skip") as loader:
        assert sorted(loader) == [0, 1, 5]
    contexts = {r.index: r.context for r in loader.errors}
    assert contexts[2] == {"offset": 128, "source": "shard-2"}
    assert contexts[3] == {"path": "/data/clip3.avi", "source": "shard-3"}
    # A context that fails does not hide the error it describes.
    assert contexts[4] == {"context_error": "LookupError('the description itself failed')"}


def test_without_any_context_a_record_says_none():
    with DataLoader(Faulty(3, fail={1: ValueError}), num_threads=1, on_error="skip") as loader:
        list(loader)
    (record,) = loader.errors
    assert record.context is None


def test_error_log_gets_each_record_as_a_json_line_at_once(tmp_path):
    log = tmp_path / "manifest.jsonl"
    fn = Faulty(12, fail={2: ValueError, 3: ValueError, 9: KeyError})
    seen_in_file = {}
    with DataLoader(fn, num_threads=1, max_len=1, ordered=True, on_error="skip", error_log=log) as loader:
        for batch in loader:
            # Ordered: by the time batch i comes, the calls before it were recorded.
            lines = log.read_text().splitlines() if log.exists() else []
            seen_in_file[batch] = [json.loads(line)["index"] for line in lines]
    # (The window of max_len + num_threads slots keeps index 9 from being made before batch 6 is taken.)
    assert seen_in_file[4] == [2, 3]
    assert seen_in_file[10] == [2, 3, 9]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["epoch"], r["index"], r["type"], r["message"]) for r in records] == [
        (0, 2, "ValueError", "bad 2"),
        (0, 3, "ValueError", "bad 3"),
        (0, 9, "KeyError", "'bad 9'"),
    ]
    assert [r.to_json() for r in loader.errors] == log.read_text().splitlines()
    fields = {"epoch", "index", "type", "message", "context", "thread", "time", "traceback", "replaced"}
    assert set(records[0]) == fields and records[0]["replaced"] == 0  # a skipped call replaced no sample


def test_error_log_appends_to_an_existing_manifest(tmp_path):
    log = tmp_path / "manifest.jsonl"
    log.write_text('{"earlier": "run"}\n')
    with DataLoader(Faulty(3, fail={0: ValueError}), num_threads=1, on_error="skip", error_log=str(log)) as loader:
        list(loader)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["index"] == 0


def test_an_error_log_in_a_missing_folder_fails_at_construction(tmp_path):
    with pytest.raises(FileNotFoundError, match="folder does not exist"):
        DataLoader(Faulty(3), on_error="skip", error_log=tmp_path / "nowhere" / "m.jsonl")


def test_a_count_budget_allows_that_many_errors():
    with DataLoader(
        Faulty(20, fail={3: ValueError, 7: ValueError}), num_threads=3, on_error="skip", max_errors=2
    ) as dl:
        assert len(list(dl)) == 18


def test_one_error_past_a_count_budget_raises_with_count_budget_and_records():
    fn = Faulty(20, fail={3: ValueError, 7: ValueError, 9: KeyError})
    with (
        DataLoader(fn, num_threads=3, on_error="skip", max_errors=2) as loader,
        pytest.raises(ErrorBudgetExceeded) as info,
    ):
        list(loader)
    message = str(info.value)
    assert "3 failed calls" in message and "max_errors=2" in message
    for quoted in ("index 3: ValueError: bad 3", "index 7: ValueError: bad 7", "index 9: KeyError: 'bad 9'"):
        assert quoted in message
    assert "loader.errors" in message
    assert info.value.budget == 2
    assert sorted(r.index for r in info.value.errors) == [3, 7, 9]
    assert loader.closed  # stopped: its threads were told to end, and the with-block waited for them


def test_a_budget_of_zero_raises_at_the_first_error_and_names_the_manifest(tmp_path):
    log = tmp_path / "m.jsonl"
    with (
        DataLoader(
            Faulty(5, fail={1: ValueError}), num_threads=1, on_error="skip", max_errors=0, error_log=log
        ) as loader,
        pytest.raises(ErrorBudgetExceeded, match=r"1 failed calls.*max_errors=0.*every record is in .*m\.jsonl"),
    ):
        list(loader)
    assert len(log.read_text().splitlines()) == 1


def test_a_fractional_budget_is_a_share_of_the_calls_made_so_far():
    # 1 failure in 20 calls is within 10%: ceil(0.1 * calls) >= 1 from the first call on.
    with DataLoader(Faulty(20, fail={10: ValueError}), num_threads=2, on_error="skip", max_errors=0.1) as loader:
        assert len(list(loader)) == 19
    # 3 failures can never be within 10% of at most 20 calls.
    fn = Faulty(20, fail={0: ValueError, 1: ValueError, 2: ValueError})
    with (
        DataLoader(fn, num_threads=2, on_error="skip", max_errors=0.1) as loader,
        pytest.raises(ErrorBudgetExceeded, match=r"[23] failed calls .* max_errors=10\.00% of calls \(\d+ of \d+\)"),
    ):
        list(loader)


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit, MemoryError])
def test_interrupts_exits_and_memory_errors_are_never_skipped(error):
    with DataLoader(Faulty(10, fail={4: error}), num_threads=2, on_error="skip") as loader, pytest.raises(error):
        list(loader)
    assert loader.errors == []


def test_with_on_error_raise_the_first_failure_stops_the_loader():
    with (
        DataLoader(Faulty(10, fail={4: ValueError}), num_threads=2) as loader,
        pytest.raises(ValueError, match="bad 4"),
    ):
        list(loader)
    assert loader.errors == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"on_error": "ignore"}, ValueError, 'on_error must be "raise" or "skip"'),
        ({"on_error": None}, ValueError, 'on_error must be "raise" or "skip"'),
        ({"max_errors": -1}, ValueError, "max_errors must be at least 0"),
        ({"max_errors": 1.5}, ValueError, r"fraction of the calls and must be in \(0, 1\).*pass an int for a count"),
        ({"max_errors": 0.0}, ValueError, r"must be in \(0, 1\)"),
        ({"max_errors": "x"}, TypeError, "max_errors must be an int, got str 'x'"),
        ({"max_errors": True}, TypeError, "max_errors must be an int"),
        ({"error_log": 3}, TypeError, "error_log must be a file path or None"),
    ],
)
def test_bad_options_are_refused_at_construction(kwargs, error, message):
    with pytest.raises(error, match=message):
        DataLoader(Faulty(3), **kwargs)


def test_train_passes_the_options_to_its_loaders(tmp_path):
    log = tmp_path / "m.jsonl"
    trained, validated = [], []
    train = Train(
        trained.append,
        Faulty(10, fail={3: ValueError}),
        Faulty(4, fail={1: KeyError}),
        max_nthread=2,
        val_task=validated.append,
        on_error="skip",
        max_errors=2,
        error_log=log,
    )
    (stats,) = train.run(1)
    assert sorted(trained) == [i for i in range(10) if i != 3] and stats.batches == 9
    assert sorted(validated) == [0, 2, 3] and stats.val.batches == 3
    assert sorted((r["index"], r["type"]) for r in map(json.loads, log.read_text().splitlines())) == [
        (1, "KeyError"),
        (3, "ValueError"),
    ]
    over_budget = Train(lambda b: None, Faulty(10, fail={3: ValueError}), on_error="skip", max_errors=0)
    with pytest.raises(ErrorBudgetExceeded):
        over_budget.run(1)
    with pytest.raises(ValueError, match='on_error must be "raise" or "skip"'):
        Train(lambda b: None, Faulty(10), on_error="ignore")
    with pytest.raises(ValueError, match="max_errors"):
        Train(lambda b: None, Faulty(10), max_errors=2.5)
