"""What one example of ``--data`` is, whatever form its line or row takes.

A JSON line or a table row (trainer/datatable.py) is one example, recognised by its keys,
in this order:

- ``messages``: ``[{"role": ..., "content": ...}, ...]``, a chat, rendered with the model's
  own chat template (trainer/data/chat.py); the loss is on every assistant turn.
- ``conversations``: ShareGPT's ``[{"from": "human"|"gpt"|"system", "value": ...}, ...]``
  (``role``/``content`` items too), read as ``messages``: ``human`` and ``user`` are
  ``user``, ``gpt`` and ``assistant`` are ``assistant``.
- ``instruction`` and ``output`` (Alpaca; ``input`` and ``system`` optional): a chat of one
  user turn, the instruction and then the input after a blank line, and one assistant turn.
- ``prompt`` and ``response``: the loss on the response; ``text``: the loss on all of it
  (both as before chats: no template).

Torch-free: what a record holds is decided before anything is tokenized.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.errors import UsageError

#: The roles a message may have; the loss is on ``assistant`` turns only.
ROLES = ("system", "user", "assistant")
#: ShareGPT's ``from`` values, as roles.
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant", "system": "system"}
#: Between an Alpaca instruction and its input, in the user turn.
ALPACA_JOIN = "\n\n"

FORMS = ('"messages", ShareGPT\'s "conversations", Alpaca\'s "instruction" and "output", '
         '"prompt" and "response", or "text"')


@dataclass(frozen=True)
class Example:
    prompt: str  # no loss on these tokens ("" for plain text)
    answer: str  # loss on these tokens


@dataclass(frozen=True)
class Conversation:
    """A chat: (role, content) pairs, the loss on the assistant's."""

    messages: tuple[tuple[str, str], ...]

    def as_dicts(self, start: int = 0, stop: int | None = None) -> list[dict]:
        """Messages ``start:stop`` as ``apply_chat_template`` takes them."""
        return [{"role": r, "content": c} for r, c in self.messages[start:stop]]

    def text(self) -> str:
        """Every message's content, one a line (what a trained tokenizer learns from)."""
        return "\n".join(c for _, c in self.messages)


def example_of(obj, where: str) -> Example | Conversation:
    """The example ``obj`` (a JSON object or a table row) holds; UsageError naming ``where``
    (``FILE:LINE`` or ``FILE row N``) when it is none of the forms."""
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: not an object; needs {FORMS}")
    if obj.get("messages") is not None:
        return _chat(obj["messages"], where, "messages", ("role", "content"), _role)
    if obj.get("conversations") is not None:
        return _chat(obj["conversations"], where, "conversations", None, _sharegpt_role)
    if isinstance(obj.get("instruction"), str) and isinstance(obj.get("output"), str):
        return _alpaca(obj, where)
    if isinstance(obj.get("prompt"), str) and isinstance(obj.get("response"), str):
        return Example(obj["prompt"], obj["response"])
    if isinstance(obj.get("text"), str):
        return Example("", obj["text"])
    raise UsageError(f"{where}: needs {FORMS}")


def _role(value, where: str) -> str:
    if value not in ROLES:
        raise UsageError(f"{where}: role {_short(value)} is not one of {', '.join(ROLES)}")
    return value


def _sharegpt_role(value, where: str) -> str:
    if value not in SHAREGPT_ROLES:
        raise UsageError(f"{where}: \"from\" {_short(value)} is not one of "
                         f"{', '.join(SHAREGPT_ROLES)}")
    return SHAREGPT_ROLES[value]


def _chat(items, where: str, key: str, keys: tuple[str, str] | None, role_of) -> Conversation:
    if not isinstance(items, list) or not items:
        raise UsageError(f"{where}: \"{key}\" must be a list of messages")
    messages = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise UsageError(f"{where}: {key}[{n}] is not an object")
        # ShareGPT's own keys, or role/content as some ShareGPT sets have them.
        pair = keys or (("from", "value") if "from" in item else ("role", "content"))
        role, content = item.get(pair[0]), item.get(pair[1])
        if not isinstance(content, str):
            raise UsageError(f"{where}: {key}[{n}] has no \"{pair[1]}\" text")
        messages.append((role_of(role, f"{where}: {key}[{n}]"), content))
    return _conversation(messages, where)


def _alpaca(obj: dict, where: str) -> Conversation:
    extra = obj.get("input")
    if extra is not None and not isinstance(extra, str):
        raise UsageError(f"{where}: Alpaca's \"input\" is not text")
    user = obj["instruction"] + (ALPACA_JOIN + extra if extra else "")
    system = obj.get("system")
    head = [("system", system)] if isinstance(system, str) and system else []
    return _conversation([*head, ("user", user), ("assistant", obj["output"])], where)


def _conversation(messages: list[tuple[str, str]], where: str) -> Conversation:
    if not any(role == "assistant" for role, _ in messages):
        raise UsageError(f"{where}: no assistant message, so nothing to train on")
    return Conversation(tuple(messages))


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
