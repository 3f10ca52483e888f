"""arena.processes: the worker pool of ``arena run`` and ``arena tune`` (a slot per process, the torch threads
split), and the launch's process count; a process outside a launch's group only returns its status."""
import os
import time

from arena.processes import launched_processes, leave_process_group, worker_pool, worker_slot


def _where(_):
    import torch

    time.sleep(0.3)  # held a while, so that both workers take tasks
    return os.getpid(), worker_slot(), torch.get_num_threads()


def test_each_worker_holds_its_own_slot_for_its_life_and_the_threads_it_was_given():
    with worker_pool(2, 3) as pool:
        found = list(pool.map(_where, range(6)))
    slots = {pid: slot for pid, slot, _ in found}
    assert len(slots) == 2 and sorted(slots.values()) == [0, 1]  # two processes, one slot each
    assert all(slots[pid] == slot for pid, slot, _ in found)  # a process keeps its slot from task to task
    assert {threads for _, _, threads in found} == {3} and os.getpid() not in slots
    assert worker_slot() == 0  # outside a pool


def test_the_launch_is_read_from_world_size_and_an_unlaunched_process_returns_its_status(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_processes() == 1
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launched_processes() == 4
    assert leave_process_group(3) == 3  # never joined a process group: nothing to leave, no exit
