"""arena.processes: the worker pool of ``arena run`` and ``arena tune`` (a slot per process, the torch threads
split), and the launch's process count; a process outside a launch's group only returns its status."""
import functools
import os
import time

import pytest

from arena.processes import launched_processes, leave_process_group, run_in_slots, worker_pool, worker_slot
from arena.scheduler import Placement


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


def _task(item, device, slot, scale):
    time.sleep(0.2)  # held a while, so that both workers take tasks
    return item * scale, device, slot, worker_slot(), os.getpid()


def test_one_slot_runs_every_task_here_in_order_on_its_device():
    found = run_in_slots(Placement(devices=("cuda:3",)), functools.partial(_task, scale=10), [3, 1, 2])
    assert found == [(i * 10, "cuda:3", 0, 0, os.getpid()) for i in (3, 1, 2)]


@pytest.mark.slow
def test_several_slots_run_the_tasks_in_a_pool_each_on_the_device_of_the_slot_its_process_holds():
    found = run_in_slots(Placement(devices=("cuda:7", "cuda:9")), functools.partial(_task, scale=10), range(6))
    assert [value for value, *_ in found] == [0, 10, 20, 30, 40, 50]  # in the order of the items
    assert all(device == ("cuda:7", "cuda:9")[slot] and slot == held for _, device, slot, held, _ in found)
    assert {slot for *_, slot, _, _ in found} <= {0, 1} and os.getpid() not in {pid for *_, pid in found}


def test_the_launch_is_read_from_world_size_and_an_unlaunched_process_returns_its_status(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_processes() == 1
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launched_processes() == 4
    assert leave_process_group(3) == 3  # never joined a process group: nothing to leave, no exit
