"""Reward tasks: prompts, answers and reward functions. ``get_task(name)`` returns a registered task;
``load_task(name, levels)`` also one named by import path, as studies name tasks. Every task subclasses
``rewards.Task`` (rewards/base.py)."""
from arena.config import ConfigError, Problem, import_path
from rewards.base import Registry, Task, chat_prompt, last_answer

TASKS = Registry()


def get_task(name: str) -> Task:
    return TASKS.get(name)


def load_task(name: str, levels: tuple[int, ...] | None = None) -> Task:
    """The task ``name`` (registered, or 'package.module:Name': a class or factory giving a Task), built with
    ``levels`` (None: the task's own); ConfigError at ``name`` or ``levels`` otherwise."""
    if ":" in name:
        factory = import_path(name, "name")
    elif name in TASKS.factories:
        factory = TASKS.factories[name]
    else:
        known = ", ".join(sorted(TASKS.factories))
        raise ConfigError([Problem("name", f"unknown task {name!r}; known tasks: {known}")])
    try:
        task = factory() if levels is None else factory(levels=tuple(levels))
    except (TypeError, ValueError) as error:  # a task refusing its levels raises ValueError
        message = f"cannot build task {name!r}: {error}" if isinstance(error, TypeError) else str(error)
        raise ConfigError([Problem("name" if levels is None else "levels", message)]) from None
    if not isinstance(task, Task):
        raise ConfigError([Problem("name", f"{name!r} did not give a Task: a task subclasses rewards.Task, which "
                                           "declares its optional members (reward_range, sample_metrics)")])
    return task


def _register_builtin() -> None:
    from rewards import arithmetic, countdown, gsm8k, math500, multi_sum, noisy_arithmetic, sudoku4, swap_sums

    TASKS.add("arithmetic", arithmetic.ArithmeticTask)
    TASKS.add("countdown", countdown.CountdownTask)
    TASKS.add("gsm8k", gsm8k.GSM8KTask)
    TASKS.add("math500", math500.Math500Task)
    TASKS.add("multi_sum", multi_sum.MultiSumTask)
    TASKS.add("noisy_arithmetic", noisy_arithmetic.NoisyArithmeticTask)
    TASKS.add("sudoku4", sudoku4.Sudoku4Task)
    TASKS.add("swap_sums", swap_sums.SwapSumsTask)


_register_builtin()

__all__ = ["TASKS", "Task", "get_task", "load_task", "chat_prompt", "last_answer"]
