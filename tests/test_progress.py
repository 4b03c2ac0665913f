"""Progress output: a bar on a terminal, one line per epoch elsewhere, nothing on request."""

import fcntl
import io
import os
import re
import struct
import termios

import pytest

from parallel_loader import Train, YieldFunction
from parallel_loader.train._progress import BAR, LINE, PassProgress, progress_mode
from parallel_loader.train._train import PassStats


class Indices(YieldFunction):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __call__(self, index):
        return index


def make_trainer():
    return Train(
        lambda b: {"loss": 1.0},
        Indices(5),
        val_yield=Indices(2),
        val_task=lambda b: {"loss": 3.0},
        num_threads=2,
    )


def test_without_a_terminal_each_epoch_is_one_plain_line(capsys):
    make_trainer().run(2)  # progress=None: stderr is captured here, so it is not a terminal
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 2 and "\r" not in err
    pattern = (
        r"epoch {}/2: 5 batches in \d+\.\d s \(\d+\.\d batches/s\), input-bound \d+%, 2 threads, loss 1 "
        r"\| val 2 batches in \d+\.\d s, loss 3"
    )
    for number, line in enumerate(lines, 1):
        assert re.fullmatch(pattern.format(number), line), line


def test_a_bar_per_epoch_with_the_figures(capsys):
    trainer = make_trainer()
    trainer.run(1, progress=True)
    trainer.run(1, progress=True)
    err = capsys.readouterr().err
    assert "\r" in err, "a bar is redrawn in place"
    # Each bar stays on its own line, its last drawing showing the whole epoch.
    finals = [line.split("\r")[-1] for line in err.split("\n") if line]
    assert len(finals) == 2
    for final, description in zip(finals, ["epoch 1/1", "epoch 2/2"], strict=True):
        assert re.fullmatch(
            description + r": 100%\|.*\| 5/5 \[.*batch/s, input-bound \d+%, 2 threads, loss 1 "
            r"\| val 2 batches in \d+\.\d s, loss 3\]",
            final,
        ), final


def test_no_progress_writes_nothing(capsys):
    make_trainer().run(1, progress=False)
    assert capsys.readouterr().err == ""


def test_test_shows_its_pass_too(capsys):
    trainer = Train(lambda b: None, Indices(3), test_yield=Indices(4), test_task=lambda b: None)
    assert trainer.test().batches == 4
    assert re.fullmatch(r"test: 4 batches in .*input-bound \d+%, 4 threads\n", capsys.readouterr().err)


def test_progress_must_be_a_bool_or_none():
    with pytest.raises(TypeError, match="progress must be True or False"):
        make_trainer().run(1, progress="yes")


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def terminal():
    """A real pseudo-terminal's file, and a function to set its width."""
    main, side = os.openpty()
    file = os.fdopen(side, "w")

    def set_width(columns):
        fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))

    yield file, set_width
    file.close()
    os.close(main)


def test_the_default_is_a_bar_on_a_terminal_and_a_line_elsewhere(terminal):
    file, set_width = terminal
    set_width(100)
    assert progress_mode(None, file) == BAR
    set_width(0)  # a pseudo-terminal that does not say its width: a bar would be drawn empty
    assert progress_mode(None, file) == LINE
    assert progress_mode(None, io.StringIO()) == LINE
    assert progress_mode(True, io.StringIO()) == BAR
    assert progress_mode(False, file) is None


class Loader:
    """Stands for a loader whose thread count changes while it runs."""

    num_threads = 2

    def __len__(self):
        return 3


def test_the_thread_count_is_read_from_the_loader_at_each_refresh():
    out = Terminal()
    loader = Loader()
    display = PassProgress("run", BAR, loader, file=out)
    display.update(0.0)
    loader.num_threads = 7
    display.update(0.0)
    display.finish(PassStats(batches=2, seconds=1.0, wait_seconds=0.5))
    assert out.getvalue().rstrip().endswith("input-bound 50%, 7 threads]")


def test_a_line_is_written_once_and_close_after_it_writes_nothing_more():
    out = io.StringIO()
    display = PassProgress("run", LINE, Loader(), file=out)
    display.update(0.1)
    assert out.getvalue() == "", "a line comes at the end of the pass only"
    display.finish(PassStats(batches=3, seconds=2.0, wait_seconds=0.5))
    display.close()
    display.finish(PassStats(batches=3, seconds=2.0, wait_seconds=0.5))
    assert out.getvalue() == "run: 3 batches in 2.0 s (1.5 batches/s), input-bound 25%, 2 threads\n"
