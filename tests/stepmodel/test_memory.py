"""Whether C x R resident layers fit on the cards, by the trainer's own accounting."""

from __future__ import annotations

import pytest

from daemon import stepmodel
from daemon.stepmodel import Shape

LAYER = 218_112_000  # Llama-3.1-8B decoder layer
EDGE = 128_256 * 4096 * 2 + 4096  # embedding, head, final norm


def test_resident_layers_that_would_not_fit_are_reported_with_the_arithmetic():
    check = stepmodel.memory_check(Shape(layers=32, cards=2, resident_per_card=16),
                                   params_per_layer=LAYER, card_gb=48.0, edge=EDGE)

    assert not check.fits
    assert check.message.startswith("2 x 16 resident layers would not fit: card 0 needs 64.2 GB")
    assert "more than its 48 GB" in check.message


def test_an_all_offload_config_fits_where_the_compute_copies_fit():
    check = stepmodel.memory_check(Shape(layers=32, cards=2), params_per_layer=LAYER,
                                   card_gb=48.0, edge=EDGE)

    assert check.fits
    # 16 layers x 8 B per parameter plus the embedding's weights and AdamW state.
    assert check.need_gb[0] == pytest.approx((16 * LAYER * 8 + 16 * EDGE // 2) / 1e9)


def test_without_a_card_limit_the_need_is_reported_and_nothing_is_refused():
    check = stepmodel.memory_check(Shape(layers=4, resident_per_card=4), params_per_layer=46_208,
                                   card_gb=stepmodel.card_gb_for("cpu"))

    assert check.fits and check.card_gb is None
    assert "no card memory limit known" in check.message


def test_the_layer_blocks_the_model_prices_are_the_trainers_placement():
    from trainer.placement import Placement

    for layers, cards in [(4, 1), (4, 2), (8, 3), (32, 2), (7, 4)]:
        trainer_blocks = [len(Placement.plan(layers, cards, 0, tied=False).block(c))
                          for c in range(cards)]
        assert stepmodel.blocks(layers, cards) == trainer_blocks


def test_the_host_holds_the_offloaded_layers_masters_gradients_and_both_moments():
    check = stepmodel.host_memory_check(Shape(layers=32, cards=2, resident_per_card=4),
                                        params_per_layer=LAYER, host_gb=512.0)

    assert check.fits
    # 24 offloaded layers x 16 B per parameter (fp32 master, gradient, m, v).
    assert check.need_gb == [pytest.approx(24 * LAYER * 16 / 1e9)]


def test_a_host_too_small_for_the_offloaded_layers_is_reported_with_its_need():
    check = stepmodel.host_memory_check(Shape(layers=32), params_per_layer=LAYER, host_gb=64.0)

    assert not check.fits
    assert check.message == ("host would need 111.7 GB for the offloaded layers, more than its "
                             "64 GB")


def test_when_the_host_plays_the_cards_their_bytes_count_against_host_memory_too():
    shape = Shape(layers=4, cards=1, resident_per_card=2)
    alone = stepmodel.host_bytes(shape, 1000)
    played = stepmodel.host_bytes(shape, 1000, edge=500, host_plays_card=True)

    assert alone == 2 * 1000 * 16
    assert played == alone + sum(stepmodel.card_bytes(shape, 1000, 500))
