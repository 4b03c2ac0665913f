"""Index store under faults: 8 processes write records to one store, and 3 are SIGKILLed at random moments.

Each writer (a forked process) writes its ``--records`` synthetic records
(``store_scale.synthetic_record``) through ``IndexStore.write``, in
transactions of 1 to 16 records. After each commit it sends its count of
records written through a pipe. A writer chosen to be killed gets SIGKILL
when its count passes a random point, so it dies somewhere in a later
transaction. Then a fresh ``IndexCache`` looks up every record of every writer:

* each record a writer reported written must return the index written;
* a record not reported may be missing, or returned equal (committed, then
  killed before reporting), never different.

    python -m benchmarks.store_faults                     # 8 writers x 20,000 records, 3 killed
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from benchmarks._common import add_out_argument, format_table, make_parser, write_report
from benchmarks.store_scale import expected_body, record_key, synthetic_record
from parallel_loader.video._base.facts import encode
from parallel_loader.video._indexes.cache import IndexCache
from parallel_loader.video._indexes.store import IndexStore

__all__ = ["campaign", "main"]

_JOIN_S = 60.0  # the longest a writer may take to end once its pipe has closed


def campaign(directory: str | os.PathLike[str], writers: int, records: int, killed: int, seed: int) -> dict[str, int]:
    """Run the campaign on the store in ``directory``; returns what was written, killed, found and wrong.

    Keys: ``finished`` (records reported written), ``killed`` (writers that died
    of SIGKILL), ``lost`` (reported, not found), ``wrong`` (found, not the index
    written), ``unreported_found`` (found though not reported), ``failed`` (writers
    that could not write).
    """
    rng = random.Random(seed)
    victims = {w: rng.randrange(1, records) for w in rng.sample(range(writers), killed)}
    fork = multiprocessing.get_context("fork")
    processes, pipes = [], {}
    for w in range(writers):
        receive, send = fork.Pipe(duplex=False)
        args = (os.fspath(directory), w, writers, records, rng.random(), send, w in victims)
        process = fork.Process(target=_write, args=args)
        process.start()
        send.close()
        processes.append(process)
        pipes[receive] = w
    done = [0] * writers
    try:
        while pipes:
            for pipe in wait(list(pipes)):
                w = pipes[pipe]
                try:
                    done[w] = int(pipe.recv_bytes())
                except EOFError:  # the writer ended, or was killed
                    del pipes[pipe]
                    continue
                if w in victims and done[w] >= victims[w]:
                    os.kill(processes[w].pid, signal.SIGKILL)
                    victims[w] = records + 1  # killed once
    finally:
        for process in processes:
            process.join(_JOIN_S)
            if process.is_alive():
                process.kill()
                process.join()
    codes = [p.exitcode for p in processes]
    return {"finished": sum(done), **_check(directory, writers, records, done), **_count(codes)}


def _write(
    directory: str, writer: int, writers: int, records: int, seed: float, pipe: Connection, victim: bool
) -> None:
    rng = random.Random(seed)
    store = IndexStore(directory)
    written = 0
    while written < records:
        n = min(records - written, rng.randint(1, 16))
        store.write(synthetic_record(writer + writers * k) for k in range(written, written + n))
        if not store.writable:
            raise SystemExit(3)
        written += n
        pipe.send_bytes(str(written).encode())
    store.close()
    while victim:  # a victim that wrote all it had before the kill landed still dies of it, as counted
        signal.pause()


def _check(directory: str | os.PathLike[str], writers: int, records: int, done: list[int]) -> dict[str, int]:
    cache = IndexCache(directory, max_bytes=1 << 20)
    lost = wrong = unreported = 0
    for w in range(writers):
        for k in range(records):
            index = cache.lookup(record_key(w + writers * k))
            if index is not None and encode(index) != expected_body(w + writers * k):
                wrong += 1
            elif index is None and k < done[w]:
                lost += 1
            elif index is not None and k >= done[w]:
                unreported += 1
    cache.close()
    return {"lost": lost, "wrong": wrong, "unreported_found": unreported}


def _count(codes: list[int | None]) -> dict[str, int]:
    return {"killed": codes.count(-signal.SIGKILL), "failed": sum(c not in (0, -signal.SIGKILL) for c in codes)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__)
    parser.add_argument("--writers", type=int, default=8, help="processes writing at once (default 8)")
    parser.add_argument("--records", type=int, default=20_000, help="records each writes (default 20,000)")
    parser.add_argument("--killed", type=int, default=3, help="writers SIGKILLed (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    add_out_argument(parser)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="store_faults-"))
    try:
        started = time.perf_counter()
        result = campaign(folder, args.writers, args.records, args.killed, args.seed)
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"index store under faults: {args.writers} processes writing {args.records:,} records each, "
        f"{args.killed} SIGKILLed at random moments (seed {args.seed}); {seconds:.1f} s"
    )
    print(format_table(["measure", "records or writers"], [[k.replace("_", " "), v] for k, v in result.items()]))
    return write_report(args, "store_faults", {"seconds": seconds, **result})


if __name__ == "__main__":
    main()
