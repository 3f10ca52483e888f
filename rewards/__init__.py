"""Reward tasks: prompts, answers and reward functions. ``get_task(name)`` returns a task."""
from rewards.base import Registry, Task, chat_prompt, last_answer

TASKS = Registry()


def get_task(name: str) -> Task:
    return TASKS.get(name)


def _register_builtin() -> None:
    from rewards import arithmetic

    TASKS.add("arithmetic", arithmetic.ArithmeticTask)


_register_builtin()

__all__ = ["TASKS", "Task", "get_task", "chat_prompt", "last_answer"]
