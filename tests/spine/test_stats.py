from daemon.stepmodel import stats


def medians(steps) -> tuple:
    """(median step seconds, tokens per second) of decoded steps, by the package's engine."""
    p = stats.PassStats.of_steps(steps)
    return p.median_step_s, p.tokens_per_s


def steps_of(times, tokens=None):
    tokens = tokens or [128] * len(times)
    return [{"step": i + 1, "step_s": t, "tokens": k, "loss": 1.0}
            for i, (t, k) in enumerate(zip(times, tokens))]


def test_medians_are_over_steps_6_to_n():
    steps = steps_of([9.0] * 5 + [1.0, 2.0, 3.0])
    assert medians(steps) == (2.0, 64.0)


def test_a_run_shorter_than_the_warm_up_uses_every_step():
    assert medians(steps_of([3.0, 1.0, 2.0]))[0] == 2.0


def test_loss_ranges_follow_the_reference_and_fit_the_run():
    assert stats.loss_ranges(200) == [(1, 25), (26, 50), (51, 100), (101, 150), (151, 200)]
    assert stats.loss_ranges(60) == [(1, 25), (26, 50), (51, 60)]


def test_drift_compares_steps_6_25_with_6_n_and_names_the_slowest_step():
    d = stats.PassStats.of_steps(steps_of([1.0] * 25 + [2.0] * 25)).drift()
    assert (d.early_median_s, d.slowest_step) == (1.0, 26)


def test_a_long_runs_loss_table_keeps_to_twelve_rows_with_round_ranges():
    ranges = stats.loss_ranges(2000)
    assert len(ranges) <= stats.MAX_LOSS_ROWS
    assert ranges == [(1, 25), (26, 50), (51, 100), (101, 500), (501, 1000), (1001, 1500),
                      (1501, 2000)]  # by 200 would be 13 rows
