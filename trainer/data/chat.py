"""Chats as rows of tokens: the model's own chat template, the loss on the assistant's turns.

Each conversation is rendered whole with ``tokenizer.apply_chat_template`` and tokenized
once (with the characters each token came from). The loss is on every assistant turn: the
characters its rendering adds after the generation prompt, which is the answer and the
template's end-of-turn (Llama 3's ``<|eot_id|>``, ChatML's ``<|im_end|>``). A token is
trained when any of its characters lies in such a span. The generation prompt (the
assistant's header), the system prompt and the user's turns carry no loss.

An assistant turn's span, for message ``i`` of the rendering ``full``: it starts where
``render(messages[:i], add_generation_prompt=True)`` ends (``full`` must start with it), and
ends where ``render(messages[:i + 1])`` ends when ``full`` starts with that too. A template
that renders a last turn otherwise (Qwen3 adds an empty thinking block to the last answer
only) ends the span after the answer's text and what the template puts after it as the last
turn (its end-of-turn). A template that fits neither is refused in one line: the loss is
never put on tokens that were guessed at.

**An example longer than ``--seq-len``** (counted, ``batches.Fitted``): its earliest turns
are dropped, a user turn and what follows up to the next user turn at a time, the system
prompt kept, until it fits (``turns_dropped``). If even the last user turn with its answer
does not fit, that much is cut at ``--seq-len`` (``answer_cut``: the answer loses its end),
or left out when not one answer token is left (``skipped``). Never silently.
"""

from __future__ import annotations

from array import array

import torch

from trainer.data.batches import ENCODE_CHUNK, Encoded, Fitted, _tensor
from trainer.data.formats import Conversation
from trainer.errors import UsageError


def check_template(tokenizer, model: str) -> None:
    """UsageError, one line, when ``tokenizer`` cannot render chats: no chat template (a named
    config's trained tokenizer has none), or no character offsets (not a fast tokenizer)."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise UsageError(f"--model {model} has no chat template: chat data (messages, "
                         "ShareGPT, Alpaca) needs a model folder whose tokenizer has one")
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"--model {model}: its tokenizer is not a fast one (no tokenizer.json),"
                         " so the assistant's tokens cannot be found")


def encode_conversations(conversations: list[Conversation], tokenizer, seq_len: int,
                         fitted: Fitted | None = None) -> Encoded:
    """Every conversation as one row of at most ``seq_len`` tokens, with the loss on its
    assistant turns; rendered and tokenized a chunk at a time."""
    fitted = fitted if fitted is not None else Fitted()
    tokens, starts, trained = array("i"), array("q", [0]), array("b")
    for lo in range(0, len(conversations), ENCODE_CHUNK):
        chunk = conversations[lo: lo + ENCODE_CHUNK]
        for n, (ids, mask) in enumerate(tokenize(render(chunk, tokenizer, lo + 1), tokenizer)):
            if len(ids) > seq_len:
                ids, mask = fit(chunk[n], tokenizer, seq_len, fitted, where=lo + n + 1)
                if ids is None:
                    continue
            tokens.extend(ids)
            trained.extend(mask)
            starts.append(len(tokens))
    return Encoded(_tensor(tokens, torch.int32), _tensor(starts, torch.long),
                   _tensor(trained, torch.int8).bool(), seq_len, tokenizer.pad_token_id)


def render(conversations: list[Conversation], tokenizer, first: int
           ) -> list[tuple[str, list[tuple[int, int]]]]:
    """Each conversation as the template renders it, with the character spans of its
    assistant turns. ``first``: the first one's number, for a message. The template is
    applied to the whole chunk at once, three times (each assistant turn's chat before it,
    the chat through it, the whole chat): a call per conversation costs twice as much."""
    turns = [[i for i, (role, _) in enumerate(c.messages) if role == "assistant"]
             for c in conversations]
    owners = [first + n for n, t in enumerate(turns) for _ in t]
    fulls = _apply(tokenizer, [c.as_dicts() for c in conversations], False,
                   list(range(first, first + len(conversations))))
    befores = iter(_apply(tokenizer, [c.as_dicts(0, i) for c, t in zip(conversations, turns)
                                      for i in t], True, owners))
    throughs = iter(_apply(tokenizer, [c.as_dicts(0, i + 1) for c, t in
                                       zip(conversations, turns) for i in t], False, owners))
    out = []
    for n, (c, full) in enumerate(zip(conversations, fulls)):
        spans = [_span(full, next(befores), next(throughs), c.messages[i][1], first + n, i)
                 for i in turns[n]]
        out.append((full, spans))
    return out


def _span(full: str, before: str, through: str, content: str, where: int, i: int
          ) -> tuple[int, int]:
    """Assistant message ``i``'s characters in ``full``, from the chat before it (with the
    generation prompt) and the chat through it."""
    if not full.startswith(before):
        raise _unsplittable(where, i)
    if full.startswith(through) and len(through) >= len(before):
        return len(before), len(through)
    # The template renders a last turn otherwise: the answer's text, then what the
    # template puts after it as the last turn.
    text = content.strip()
    at = full.find(text, len(before))
    tail = through[through.rfind(text) + len(text):] if text else ""
    if at < 0 or not text or not full.startswith(tail, at + len(text)):
        raise _unsplittable(where, i)
    return len(before), at + len(text) + len(tail)


def _apply(tokenizer, chats: list[list[dict]], prompt: bool, owners: list[int]) -> list[str]:
    """``apply_chat_template`` over ``chats``; UsageError naming the example (``owners``: each
    chat's) whose chat the template refuses."""
    if not chats:
        return []
    try:
        return tokenizer.apply_chat_template(chats, tokenize=False, add_generation_prompt=prompt)
    except Exception as exc:  # noqa: BLE001 - a template's raise_exception, or a Jinja error
        together = exc
    for chat, where in zip(chats, owners):  # which one: each alone
        try:
            tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt)
        except Exception as exc:  # noqa: BLE001 - as above
            raise UsageError(f"example {where}: the chat template refused it "
                             f"({_first_line(exc)})") from None
    raise UsageError(f"examples {owners[0]}-{owners[-1]}: the chat template refused them "
                     f"together ({_first_line(together)}), and none alone")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _unsplittable(where: int, message: int) -> UsageError:
    return UsageError(f"example {where}: the chat template does not render message "
                      f"{message + 1} (an assistant turn) where a shorter chat would end, so "
                      "its tokens cannot be told apart; the loss is never put on a guess")


def tokenize(rendered: list[tuple[str, list[tuple[int, int]]]], tokenizer
             ) -> list[tuple[list[int], list[int]]]:
    """(token ids, 1 where the loss is taken) of each rendered chat: a token is trained when
    any of its characters lies in one of its assistant spans."""
    if not rendered:
        return []
    encodings = tokenizer.backend_tokenizer.encode_batch([text for text, _ in rendered],
                                                         add_special_tokens=False)
    # Every chat's characters on one line, so one search marks the whole chunk.
    text_at = torch.tensor([0] + [len(text) for text, _ in rendered]).cumsum(0)
    counts = torch.tensor([len(e.ids) for e in encodings])
    offsets = torch.tensor([o for e in encodings for o in e.offsets],
                           dtype=torch.long).reshape(-1, 2)
    offsets += text_at[:-1].repeat_interleave(counts)[:, None]
    end = int(text_at[-1]) + 1  # past every character: a span no token reaches
    spans = torch.tensor([(s + int(text_at[n]), e + int(text_at[n]))
                          for n, (_, chat) in enumerate(rendered) for s, e in chat]
                         + [(end, end)], dtype=torch.long)
    first = offsets[:, 0].contiguous()
    last = torch.maximum(offsets[:, 1], first + 1)
    # The first span ending after the token's first character overlaps it when it begins
    # before the token's end (spans are disjoint and in order).
    k = torch.searchsorted(spans[:-1, 1].contiguous(), first, right=True)
    inside = spans[k, 0] < last
    masks = inside.to(torch.int8).split(counts.tolist())
    return [(e.ids, m.tolist()) for e, m in zip(encodings, masks)]


def fit(conversation: Conversation, tokenizer, seq_len: int, fitted: Fitted, where: int
        ) -> tuple[list[int] | None, list[int] | None]:
    """A conversation longer than ``seq_len`` made to fit by the rule above, and counted;
    (None, None) when it is left out."""
    messages = conversation.messages
    system = 0
    while system < len(messages) and messages[system][0] == "system":
        system += 1
    answered = max(i for i, (role, _) in enumerate(messages) if role == "assistant")
    # Where a shorter chat may begin: each later user turn with an answer after it.
    cuts = [i for i in range(system + 1, answered) if messages[i][0] == "user"]
    ids = mask = None
    for i in cuts:
        shorter = Conversation(messages[:system] + messages[i:])
        ((ids, mask),) = tokenize(render([shorter], tokenizer, where), tokenizer)
        if len(ids) <= seq_len:
            fitted.turns_dropped += 1
            return ids, mask
    if ids is None:  # no turn to drop
        ((ids, mask),) = tokenize(render([conversation], tokenizer, where), tokenizer)
    ids, mask = ids[:seq_len], mask[:seq_len]
    if not any(mask[1:]):  # the first token is never predicted
        fitted.skipped += 1
        return None, None
    fitted.answer_cut += 1
    return ids, mask
