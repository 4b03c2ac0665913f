"""Long runs: bad batches skipped within a budget, a stuck call caught by the watchdog, a resume mid-epoch."""

import json
import threading

import numpy as np

from parallel_loader import DataLoader, YieldFunction


class Batches(YieldFunction):
    """20 batches an epoch; batch i is filled with i. Some indices fail, and some hang until released."""

    def __init__(self, bad=(), stuck=()):
        self.bad, self.stuck = set(bad), set(stuck)
        self.release = threading.Event()

    def __len__(self):
        return 20

    def __call__(self, index):
        if index in self.bad:
            raise OSError(5, "Input/output error", f"videos/{index}.mp4")  # its filename goes to the record
        if index in self.stuck:
            self.release.wait(30)  # a read from a network share that does not answer
        return np.full((4, 16), index, dtype=np.float32)


def skip_bad_batches(error_log):
    """Skip failing batches, at most 10% of the calls, and append each failure to error_log as a JSON line."""
    loader = DataLoader(Batches(bad={13}), num_threads=4, on_error="skip", max_errors=0.1, error_log=error_log)
    with loader:
        delivered = [int(batch[0, 0]) for batch in loader]  # every batch but 13, each once
    record = loader.errors[0]  # ErrorRecord: epoch, index, type, message, context, thread, ...
    print(f"{len(delivered)} batches; skipped batch {record.index}: {record.type}, {record.context}")
    return delivered, loader.errors


def catch_stuck_calls():
    """A call running past call_timeout is recorded as a failure; another thread takes the stuck one's place."""
    data = Batches(stuck={5})
    with DataLoader(data, num_threads=2, on_error="skip", call_timeout=0.5) as loader:
        delivered = [int(batch[0, 0]) for batch in loader]  # every batch but 5
        data.release.set()  # Python cannot kill a thread: the stuck one ends when its call returns
    print(f"{len(delivered)} batches; {loader.errors[0].type} at batch {loader.errors[0].index}")
    return delivered, loader.errors


def resume_mid_epoch():
    """Save the loader's state mid-epoch; a new loader, with other threads, delivers the rest of that epoch."""
    with DataLoader(Batches(), num_threads=4, shuffle=True, seed=0) as loader:
        batches = iter(loader)
        before = [int(next(batches)[0, 0]) for _ in range(8)]
        state = json.dumps(loader.state_dict())  # small and JSON-serialisable: save it with the model's weights
    # Later, in a new process: the same data, the same seed, any number of threads.
    resumed = DataLoader(Batches(), num_threads=2, shuffle=True, seed=0)
    resumed.load_state_dict(json.loads(state))
    with resumed:
        after = [int(batch[0, 0]) for batch in resumed]  # the 12 positions not yet delivered
    print(f"{len(before)} batches before the stop, {len(after)} after it")
    return before, after


if __name__ == "__main__":
    skip_bad_batches("bad_batches.jsonl")
    catch_stuck_calls()
    resume_mid_epoch()
