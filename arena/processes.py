"""Process plumbing shared by ``arena run`` and ``arena tune``: the pool of worker processes that runs or trials
go to, and the process group of one run across the processes of a ``torchrun`` / ``accelerate launch``.

Nothing here knows what a run is: the scheduler and the tuner hand the pool their work.
"""
from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import os
import sys
import threading
import time

_slot = 0  # in a pool worker: the slot (device, progress-bar row) it holds for its whole life


def worker_pool(slots: int, threads: int) -> concurrent.futures.ProcessPoolExecutor:
    """``slots`` worker processes, each holding one slot (``worker_slot``) and ``threads`` torch threads (the
    cores split between the workers, so that parallel runs do not oversubscribe them), each ending when this
    process dies (``exit_with_parent``). Spawned, not forked: fork would copy torch's thread pools and locks."""
    context = multiprocessing.get_context("spawn")
    free = context.Queue()
    for slot in range(slots):
        free.put(slot)
    return concurrent.futures.ProcessPoolExecutor(slots, mp_context=context, initializer=_start_worker,
                                                  initargs=(free, threads))


def run_in_slots(placement, task, items) -> list:
    """``task(item, device, slot)`` for each of ``items``, in order: in this process when ``placement`` has one
    slot, else in a ``worker_pool`` of a process per slot, on the device of the slot the process holds. ``task``
    must pickle: a module's function, or a ``functools.partial`` of one."""
    if placement.slots == 1:
        return [task(item, placement.device(0), 0) for item in items]
    with worker_pool(placement.slots, placement.threads()) as pool:
        futures = [pool.submit(_in_slot, task, item, placement) for item in items]
        return [future.result() for future in futures]


def _in_slot(task, item, placement):
    return task(item, placement.device(worker_slot()), worker_slot())


def _start_worker(free, threads: int) -> None:
    import torch

    global _slot
    exit_with_parent()
    _slot = free.get()
    torch.set_num_threads(threads)


def worker_slot() -> int:
    """The slot this pool worker holds (0 outside a pool)."""
    return _slot


def exit_with_parent(poll_seconds: float = 1.0) -> None:
    """End this pool worker when the invocation that started it dies. A SIGKILL'd ``arena run`` or ``arena tune``
    cannot stop its workers, which would go on training (and logging) runs that the rerun resumes at the same
    time; the rerun's resume is safe once they are gone (checkpoints are written atomically)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def launched_processes() -> int:
    """The processes that ``torchrun`` or ``accelerate launch`` started (their WORLD_SIZE); 1 otherwise."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def join_process_group() -> str:
    """Join the launch's process group (nccl on GPUs, this process on cuda:LOCAL_RANK; gloo on the CPU) and return
    this process's device. The process ends in ``leave_process_group``."""
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=torch.device(device))
        return device
    dist.init_process_group("gloo")
    return "cpu"


def leave_process_group(code: int) -> int:
    """End a process that joined a launch's process group, with exit status ``code``; in any other process,
    return ``code``.

    Ranks leave together after a success (a rank gone early aborts gloo in the others), and at once after an
    error: the others may wait in a collective, and the launcher stops them. The process then ends by
    ``os._exit``, without the interpreter's shutdown: torch's DTensor caches keep FSDP's process group, and so
    gloo's worker threads, alive past ``destroy_process_group``. A worker still releasing the tensors of a
    finished collective takes the GIL, and a thread that does so while the interpreter shuts down aborts the
    process ('terminate called without an active exception'): one 2-process CPU launch in three did. Nothing
    is lost by skipping the shutdown: MLflow calls are synchronous, and the streams and log handlers are
    flushed here."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_initialized():
        return code
    if code == 0:
        dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
