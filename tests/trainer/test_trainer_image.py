"""The trainer image (deploy/furiosa/Dockerfile) cannot be built here; its pins can be read."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

DOCKERFILE = REPO / "deploy" / "furiosa" / "Dockerfile"


def exact_pins(requirements) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for r in requirements
            if (m := re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", r.strip()))}


def dockerfile_pins(text: str) -> dict[str, str]:
    """The name==version words of every ``pip install`` in the Dockerfile."""
    words = []
    for command in re.split(r"&&|\n", text.replace("\\\n", " ")):
        if "pip install" in command:
            words += command.split("pip install", 1)[1].split()
    return exact_pins(w.strip("'\"") for w in words)


def test_the_image_pins_torch_and_furiosa_torch_as_the_furiosa_extra_does():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["furiosa"]
    want = exact_pins(extra)
    assert {"torch", "furiosa-torch"} <= set(want)
    assert dockerfile_pins(DOCKERFILE.read_text()) == want


def test_the_image_installs_this_trainer_with_its_furiosa_extra():
    text = DOCKERFILE.read_text()
    assert "COPY trainer trainer" in text and "pip install '.[furiosa]'" in text
    assert re.search(r"^FROM python:3\.11", text, re.MULTILINE)  # the wheel is cp311
