import json
import math

from trainer import records


def step(n=1, loss=2.5, label="main"):
    return records.Step(config_label=label, step=n, loss=loss, step_s=0.5, tokens=128, lr=1e-3,
                        phases={"fwd_bwd": 0.4, "host_optim": 0.1}, time=100.0 + n)


def test_a_step_written_then_parsed_is_the_same_step():
    assert records.parse_line(records.dumps(step())) == step()


def test_every_kind_round_trips():
    for record in (
        records.Start("main", {"cards": 1}, run_id="3", versions={"torch": "2.13"}, time=1.0),
        records.Event("compile", "head graph 94 s", data={"seconds": 94}, time=2.0),
        records.End("oom", "layer 3 upload", time=3.0),
    ):
        assert records.parse_line(records.dumps(record)) == record


def test_a_line_that_is_not_json_is_a_log_line():
    assert records.parse_line("Loading model...") == records.LogLine("Loading model...")
    assert records.parse_line("{not json") == records.LogLine("{not json")


def test_json_without_kind_is_a_log_line():
    assert isinstance(records.parse_line('{"loss": 1.0}'), records.LogLine)


def test_a_step_of_the_wrong_shape_is_malformed_and_says_why():
    parsed = records.parse_line('{"kind": "step", "step": 3, "loss": "high"}')
    assert isinstance(parsed, records.Malformed)
    assert "missing" in parsed.reason
    parsed = records.parse_line(json.dumps({"kind": "step", "step": 0, "loss": 1, "step_s": 1,
                                            "tokens": 1, "lr": 1}))
    assert isinstance(parsed, records.Malformed) and "step 0" in parsed.reason


def test_an_unknown_kind_or_newer_version_is_malformed_not_an_exception():
    assert isinstance(records.parse_line('{"kind": "metrics"}'), records.Malformed)
    newer = json.dumps({"kind": "end", "v": records.SCHEMA_VERSION + 1, "status": "ok"})
    assert isinstance(records.parse_line(newer), records.Malformed)


def test_a_nan_or_infinite_loss_survives_the_trip():
    nan = records.parse_line(records.dumps(step(loss=float("nan"))))
    inf = records.parse_line(records.dumps(step(loss=float("inf"))))
    assert math.isnan(nan.loss) and not nan.loss_is_finite
    assert inf.loss == math.inf
    assert "NaN" not in records.dumps(step(loss=float("nan")))  # strict JSON readers load it


def test_extra_step_fields_are_kept():
    line = json.loads(records.dumps(step()))
    line["resident_layers"] = 4
    assert records.parse_line(json.dumps(line)).extra == {"resident_layers": 4}


def test_a_partial_last_line_waits_for_its_newline():
    splitter = records.LineSplitter()
    first = records.dumps(step(1)) + "\n"
    second = records.dumps(step(2))
    assert splitter.feed((first + second[:10]).encode()) == [first.rstrip("\n")]
    assert splitter.offset == len(first.encode())
    assert splitter.feed((second[10:] + "\n").encode()) == [second]


def test_the_splitter_counts_bytes_not_characters():
    splitter = records.LineSplitter()
    splitter.feed("리뷰 감성\n".encode())
    assert splitter.offset == len("리뷰 감성\n".encode())


# === hostile lines: each one wedged the daemon before the contract checked it ===

def _step_json(**fields):
    base = {"kind": "step", "step": 1, "loss": 2.0, "step_s": 0.5, "tokens": 128, "lr": 1e-3}
    return json.dumps({**base, **fields})


def test_integers_past_64_bits_in_step_or_tokens_are_malformed_not_an_overflow():
    for fields in ({"step": 2**63}, {"tokens": 2**64}, {"step": 1e300}, {"tokens": -2**63 - 1}):
        parsed = records.parse_line(_step_json(**fields))
        assert isinstance(parsed, records.Malformed), fields
        assert "64 bits" in parsed.reason
    assert records.parse_line(_step_json(step=2**63 - 1)).step == 2**63 - 1


def test_a_nan_time_makes_an_event_an_end_or_a_nan_loss_step_malformed():
    lines = ['{"kind": "event", "event": "x", "message": "m", "time": "nan"}',
             '{"kind": "end", "status": "ok", "time": "nan"}',
             _step_json(loss="nan", time="nan"),
             _step_json(time="inf")]
    for line in lines:
        parsed = records.parse_line(line)
        assert isinstance(parsed, records.Malformed) and "time is" in parsed.reason, line


def test_a_nan_step_s_or_lr_is_malformed_so_the_step_is_counted_not_dropped():
    for fields in ({"step_s": "nan"}, {"step_s": "inf"}, {"lr": "nan"}):
        parsed = records.parse_line(_step_json(**fields))
        assert isinstance(parsed, records.Malformed), fields


def test_lone_surrogates_in_a_message_a_key_or_a_label_become_replacement_characters():
    event = records.parse_line('{"kind": "event", "event": "e", "message": "a\\ud800b",'
                               ' "data": {"\\udfff": 1}}')
    step = records.parse_line(_step_json(config_label="X").replace('"X"', '"\\ud800"'))
    assert event.message == "a\ufffdb" and event.data == {"\ufffd": 1}
    assert step.config_label == "\ufffd"
    for text in (event.message, *event.data, step.config_label):
        text.encode("utf-8")  # what SQLite does with every string


def test_json_nested_a_thousand_levels_deep_is_malformed_not_a_recursion_error():
    deep = '{"kind": "event", "data": ' + "[" * 1000 + "]" * 1000 + "}"
    assert isinstance(records.parse_line(deep), records.Malformed)
    moderately = '{"kind": "event", "data": {"x": ' + "[" * 100 + "]" * 100 + "}}"
    parsed = records.parse_line(moderately)
    assert isinstance(parsed, records.Malformed) and "deeper than" in parsed.reason


def test_a_start_record_without_config_label_is_the_main_pass():
    parsed = records.parse_line('{"kind": "start", "config": {"cards": 1}}')
    assert parsed == records.Start(records.MAIN, {"cards": 1})


def test_a_start_whose_git_or_host_is_not_a_string_is_malformed():
    parsed = records.parse_line('{"kind": "start", "config": {}, "git": {"sha": 1}}')
    assert isinstance(parsed, records.Malformed) and "git" in parsed.reason
