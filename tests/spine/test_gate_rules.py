from daemon.gates import rules
from daemon.probes.host_reading import Holder, HostReading


def host(load1=1.0, holders=(), complete=True):
    return HostReading(time=0.0, load=(load1, 1.0, 1.0), holders=tuple(holders),
                       complete=complete)


KIM = Holder(4121, "kim", "python bench.py", ("/dev/rngd/npu0pe0-3",))


NOT_APPLICABLE = rules.ClusterReading()


def evaluate(h, cluster=NOT_APPLICABLE, cards=1, active=(), own=()):
    return {g.name: g for g in rules.evaluate(host=h, cluster=cluster, cards=cards,
                                             active=list(active), load_max=150,
                                             own_pids=set(own))}


def test_a_quiet_host_passes_every_gate_and_local_cards_are_not_applicable():
    result = evaluate(host())
    assert rules.all_pass(list(result.values()))
    assert result["cards_free"].verdict == rules.NA
    assert result["image_present"].verdict == rules.NA


def test_load_at_the_threshold_blocks():
    assert evaluate(host(load1=150.0))["host_load"].verdict == rules.FAIL
    assert evaluate(host(load1=149.9))["host_load"].verdict == rules.PASS


def test_a_foreign_device_holder_blocks_and_is_named():
    gate = evaluate(host(holders=[KIM]))["device_idle"]
    assert gate.blocks
    assert "pid 4121 python bench.py (kim) holds /dev/rngd/npu0pe0-3" in gate.detail


def test_our_own_trainer_holding_a_device_does_not_block():
    assert not evaluate(host(holders=[KIM]), own=[4121])["device_idle"].blocks


def test_not_being_root_is_said_plainly():
    assert "not root" in evaluate(host(complete=False))["device_idle"].detail


def test_too_few_free_cards_or_a_missing_image_block():
    result = evaluate(host(), rules.ClusterReading(cards_free=1, image_present=False), cards=2)
    assert result["cards_free"].blocks and result["image_present"].blocks


def test_an_active_run_blocks():
    result = evaluate(host(), active=[{"id": 7, "status": "running"}])
    assert result["one_at_a_time"].detail == "run 7 is running"
