"""Numerics tolerances of the trainer tests, derived from fp32 arithmetic.

Nothing here is a figure that "passed once". Every bound is built from:

- EPS, fp32's unit roundoff step (2**-23): one rounding moves a value by at
  most EPS relative.
- gamma(n) = n * EPS: two fp32 sums of the same n terms in different orders
  (another SIMD width, an FMA or not, another blocking) differ by at most
  gamma(n) times the sum of the terms' magnitudes (Higham, Accuracy and
  Stability of Numerical Algorithms, 3.1). This is why the result differs
  between ATEN_CPU_CAPABILITY=avx512, avx2 and default: each picks other
  kernels, so other orders.
- The reduction path: the gradient of a weight is a sum over the step's tokens
  of (activation x upstream gradient), and the upstream gradient came back
  through every layer above, each a sum over its widths (MLP intermediate,
  hidden, the attended positions) and, at the head, over the vocabulary. A
  rounding difference anywhere on that path reaches the gradient, so the
  gradient's relative error is at most gamma(path length).
- AdamW. Its step direction u = m_hat / (sqrt(v_hat) + eps_adam) is, by
  Cauchy-Schwarz over the two moving averages' weights a_i and b_i,
  |u_t| <= U_t = sqrt(sum_i a_i**2 / b_i) (1.0 at step 1, 1.011 at step 10 for
  betas (0.9, 0.95)): one step moves a weight by at most lr_t * U_t (plus the
  decay lr_t * wd * |w|). Gradients off by a relative delta move m_hat by delta
  and sqrt(v_hat) by delta, so u by at most 2 * delta * U_t.

Hence, after T steps, a weight computed two ways differs by at most

    |dw| <= 2 * T * EPS * |w|                      (w <- w*(1 - lr*wd) - lr*u
                                                    rounds twice a step)
          + sum_t lr_t * U_t * 2 * gamma(path)     (the steps' directions)

The first-order effect of the weights' differences on later gradients is
|dw|/|w| (about 1e-5 here), far below gamma(path) (1.5e-4 for tiny-llama), so
it stays inside the second term. A loss computed at weights off by dw differs
by at most sum_i |g_i| * |dw_i| (first order; |g| is the reference loop's
gradient at that step), plus its own forward's reordering.
"""

from __future__ import annotations

import math

from trainer.engine import optim

EPS = 2.0 ** -23


def gamma(n: int) -> float:
    """Bound on the relative difference of two orders of an n-term fp32 sum."""
    return n * EPS


def path_length(tokens: int, seq_len: int, hidden: int, intermediate: int, layers: int,
                vocab: int) -> int:
    """Terms summed along the longest chain from the loss back to a weight's gradient."""
    return tokens + vocab + layers * (intermediate + hidden + seq_len)


def tiny_path(tokens: int, seq_len: int, vocab: int = 128) -> int:
    """path_length for tiny-llama and tiny-qwen2 (4 layers, hidden 64, intermediate 176)."""
    return path_length(tokens, seq_len, hidden=64, intermediate=176, layers=4, vocab=vocab)


def adam_direction_bound(step: int, betas: tuple[float, float] = optim.BETAS) -> float:
    """U_t: the largest |m_hat / sqrt(v_hat)| any gradient history can give at 1-based step t."""
    b1, b2 = betas
    total = 0.0
    for i in range(1, step + 1):
        a = (1 - b1) * b1 ** (step - i) / (1 - b1 ** step)
        b = (1 - b2) * b2 ** (step - i) / (1 - b2 ** step)
        total += a * a / b
    return math.sqrt(total)


def weight_tolerance(lrs: list[float], path: int) -> tuple[float, float]:
    """(rtol, atol) for weights after the steps with learning rates ``lrs``."""
    rtol = 2 * len(lrs) * EPS
    atol = sum(lr * adam_direction_bound(t) for t, lr in enumerate(lrs, 1)) * 2 * gamma(path)
    return rtol, atol


def loss_tolerances(losses: list[float], grad_l1: list[float], grad_w_l1: list[float],
                    lrs: list[float], path: int, forward_terms: int) -> list[float]:
    """Absolute tolerance of each step's loss against the reference loop's.

    ``grad_l1[t]`` is sum |g| and ``grad_w_l1[t]`` sum |g * w| over every weight at
    step t of the reference; ``forward_terms`` the length of the forward's
    longest sum in another order (tokens only when the same kernels run).
    """
    out = []
    for t, loss in enumerate(losses):
        # Weights before step t+1 went through t steps.
        rtol, atol = weight_tolerance(lrs[:t], path) if t else (0.0, 0.0)
        out.append(gamma(forward_terms) * abs(loss) + grad_l1[t] * atol + grad_w_l1[t] * rtol)
    return out
