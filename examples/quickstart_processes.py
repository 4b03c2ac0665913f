"""Process mode: a yield function whose time goes in Python itself runs in worker processes, not threads."""

import numpy as np

from parallel_loader import DataLoader, YieldFunction


class ParsedBatches(YieldFunction):
    """Pure-Python work per batch (parsing, loops): threads would run it one at a time, under the GIL.

    Defined at module level and holding no open file or lock, so the worker processes can unpickle it.
    """

    def __len__(self):
        return 16

    def __call__(self, index):
        rows = [f"{index},{i},{i * i % 7}" for i in range(20_000)]  # stands in for parsing annotations
        return np.array([[int(field) for field in row.split(",")] for row in rows])


def main():
    # 2 worker processes of 1 thread each; batches come back through shared memory.
    with DataLoader(ParsedBatches(), num_threads=1, processes=2, ordered=True) as loader:
        firsts = [int(batch[0, 0]) for batch in loader]  # int64 (20000, 3) batches, in index order
    print(f"{len(firsts)} batches, in order: {firsts == list(range(16))}")
    return firsts


if __name__ == "__main__":  # needed: each worker process starts by importing this file
    main()
