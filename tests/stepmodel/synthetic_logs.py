"""Synthetic step logs made from known terms, in the step-time model's form."""

from __future__ import annotations

from trainer import records

#: Known terms (seconds), in the step-time model's form, for an 8B-like model:
#: 32 layers, seq 512, accum 4, micro-batch 1.
KNOWN = {"compute": 0.80, "upload": 0.007, "download": 0.006, "host_optim": 0.19,
         "device_optim_fixed": 0.05, "device_optim": 0.012, "wait": 0.003, "unclaimed": 0.010}
SHAPE = {"layers": 32, "seq_len": 512, "accum": 4, "micro_batch": 1}

#: Step-to-step spread: steps 6-N cycle through these factors (median 1.0);
#: steps 1-5 are warm-up, three times slower.
SPREAD = (0.97, 0.99, 1.00, 1.01, 1.03)


def phases_for(terms: dict, *, layers: int, cards: int, resident_per_card: int,
               seq_len: int, accum: int, micro_batch: int = 1, base_tokens: int = 2048,
               base_layers: int = 32) -> dict:
    """Each phase's seconds by the model's form, from known terms."""
    resident = cards * resident_per_card
    offloaded = layers - resident
    tokens = seq_len * accum * micro_batch
    # The host optimizer's fixed part, where given: with no layer offloaded it goes,
    # less its call, to the cards' optimizer.
    fixed, call = terms.get("host_optim_fixed", 0.0), terms.get("host_optim_call", 0.0)
    return {
        "fwd_bwd": terms["compute"] * tokens / base_tokens * layers / base_layers,
        "upload": terms["upload"] * offloaded,
        "download": terms["download"] * offloaded,
        "host_optim": fixed + terms["host_optim"] * offloaded if offloaded else 0.0,
        "device_optim": terms["device_optim_fixed"] + terms["device_optim"] * resident
                        + (0.0 if offloaded else fixed - call),
        "wait": terms["wait"],
    }


def make_pass(terms: dict = KNOWN, *, cards: int = 1, resident_per_card: int = 0,
              steps: int = 20, label: str = records.BASELINE, raw: bool = True,
              **shape) -> list:
    """A pass's step records as raw JSON dicts (or records.Step objects with raw=False)."""
    shape = {**SHAPE, **shape}
    base = phases_for(terms, cards=cards, resident_per_card=resident_per_card, **shape)
    extra = {**shape, "cards": cards, "resident_per_card": resident_per_card,
             "resident_layers": cards * resident_per_card,
             "offloaded_layers": shape["layers"] - cards * resident_per_card,
             "params_per_layer": 218_112_000}
    out = []
    for n in range(1, steps + 1):
        f = 3.0 if n <= 5 else SPREAD[(n - 6) % len(SPREAD)]
        phases = {k: v * f for k, v in base.items()}
        step = records.Step(
            config_label=label, step=n, loss=2.0 - n * 0.01,
            step_s=(sum(base.values()) + terms["unclaimed"]) * f,
            tokens=shape["seq_len"] * shape["accum"] * shape["micro_batch"], lr=1e-5,
            phases=phases, time=1000.0 + n, extra=extra)
        out.append(step if not raw else records.to_dict(step))
    return out


def expected_step_s(terms: dict = KNOWN, **shape) -> float:
    shape = {**SHAPE, "cards": 1, "resident_per_card": 0, **shape}
    return sum(phases_for(terms, **shape).values()) + terms["unclaimed"]
