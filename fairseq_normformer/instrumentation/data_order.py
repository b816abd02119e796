"""``--data-order-file F``: which examples each rank trained on, one JSON line per batch
(``{"update": u, "rank": r, "ids": [...]}``), appended by every rank to the same file."""
import json
import os

import torch


def data_parallel_rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def record_batch(path: str, update: int, ids: torch.Tensor) -> None:
    """One write of one line to a file opened for appending: lines of several ranks do not interleave."""
    line = json.dumps({"update": update, "rank": data_parallel_rank(), "ids": ids.tolist()}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)

