"""Reward tasks: prompts, answers and reward functions. ``get_task(name)`` returns a task."""
from rewards.base import Registry, Task, chat_prompt, last_answer

TASKS = Registry()


def get_task(name: str) -> Task:
    return TASKS.get(name)


def _register_builtin() -> None:
    from rewards import arithmetic, countdown, gsm8k, math500, multi_sum, noisy_arithmetic, sudoku4

    TASKS.add("arithmetic", arithmetic.ArithmeticTask)
    TASKS.add("countdown", countdown.CountdownTask)
    TASKS.add("gsm8k", gsm8k.GSM8KTask)
    TASKS.add("math500", math500.Math500Task)
    TASKS.add("multi_sum", multi_sum.MultiSumTask)
    TASKS.add("noisy_arithmetic", noisy_arithmetic.NoisyArithmeticTask)
    TASKS.add("sudoku4", sudoku4.Sudoku4Task)


_register_builtin()

__all__ = ["TASKS", "Task", "get_task", "chat_prompt", "last_answer"]
