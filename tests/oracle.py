"""The exact oracles live in ``methods.oracle`` (the estimator report uses them too)."""
from methods.oracle import analytic_elbo, conditionals, exact_random_order_logprob, next_token_logprobs  # noqa: F401
