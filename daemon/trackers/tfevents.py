"""TensorBoard's event file format, written without TensorBoard: records and their protos.

An event file is a sequence of TFRecords (a little-endian uint64 length, its masked
CRC-32C, the bytes, their masked CRC-32C), each an ``Event`` protocol buffer. rngdctl
writes four kinds: the file's version, a step's scalars, a text summary (the note) and the
hparams plugin's session start and end (the run's config and how it ended). These few
messages are encoded here by hand, in protobuf's wire format, so the daemon writes
TensorBoard's files without the ``tensorboard`` package and its dependencies (grpcio, the
data server: about 60 MB); tests/trackers reads every kind back with TensorBoard's own
reader. Field numbers are those of tensorboard/compat/proto (event.proto, summary.proto,
tensor.proto) and tensorboard/plugins/hparams/plugin_data.proto.
"""

from __future__ import annotations

import math
import struct

# === protobuf's wire format ==================================================

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 and enums: two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _len(field: int, payload: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(payload)) + payload


def _text(field: int, text: str) -> bytes:
    return _len(field, text.encode("utf-8"))


def _double(field: int, x: float) -> bytes:
    return _key(field, _FIXED64) + struct.pack("<d", x)


def _int(field: int, n: int) -> bytes:
    return _key(field, _VARINT) + _varint(n)


# === CRC-32C, masked as TFRecord wants =======================================

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecord uses; zlib has only CRC-32."""
    crc, table = 0xFFFFFFFF, _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(data: bytes) -> bytes:
    """One TFRecord holding ``data``."""
    length = struct.pack("<Q", len(data))
    return length + _masked(length) + data + _masked(data)


# === events ==================================================================

FILE_VERSION = "brain.Event:2"

# Event: wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5.
# Summary: value 1 (repeated). Summary.Value: tag 1, simple_value 2 (float), tensor 8,
# metadata 9. SummaryMetadata: plugin_data 1 (plugin_name 1, content 2).


def _event(wall_time: float, step: int, body: bytes) -> bytes:
    return record(_double(1, wall_time) + (_int(2, step) if step else b"") + body)


def version_event(wall_time: float) -> bytes:
    """The record every event file starts with."""
    return _event(wall_time, 0, _text(3, FILE_VERSION))


#: Each tag's encoded prefix, made once: a step's event is mostly these.
_TAGS: dict[str, bytes] = {}


def _scalar(tag: str, value: float) -> bytes:
    prefix = _TAGS.get(tag)
    if prefix is None:
        prefix = _TAGS.setdefault(tag, _text(1, tag) + _key(2, _FIXED32))
    return prefix + struct.pack("<f", value)


def scalars_event(wall_time: float, step: int, values: dict[str, float]) -> bytes:
    """One step's scalars (a NaN or an infinity is kept: TensorBoard shows it)."""
    summary = b"".join(_len(1, _scalar(tag, _as_float32(v))) for tag, v in values.items())
    return _event(wall_time, step, _len(5, summary))


def _as_float32(x: float) -> float:
    """A float32's nearest value; past float32's range, an infinity of the same sign."""
    try:
        struct.pack("<f", x)
    except OverflowError:
        return math.copysign(math.inf, x)
    return x


def _plugin(name: str, content: bytes = b"") -> bytes:
    plugin_data = _text(1, name) + (_len(2, content) if content else b"")
    return _len(9, _len(1, plugin_data))


# TensorProto: dtype 1 (DT_FLOAT 1, DT_STRING 7), tensor_shape 2 (dim 2), string_val 8.
_DT_FLOAT, _DT_STRING = 1, 7


def text_event(wall_time: float, step: int, tag: str, text: str) -> bytes:
    """A text summary (the text plugin's): a scalar string tensor."""
    tensor = _int(1, _DT_STRING) + _len(2, b"") + _len(8, text.encode("utf-8"))
    value = _text(1, tag) + _len(8, tensor) + _plugin("text")
    return _event(wall_time, step, _len(5, _len(1, value)))


# The hparams plugin: HParamsPluginData: version 1, session_start_info 3, session_end_info 4.
# SessionStartInfo: hparams 1 (map<string, google.protobuf.Value>), group_name 4,
# start_time_secs 5. SessionEndInfo: status 1, end_time_secs 2. Value: number_value 2,
# string_value 3, bool_value 4 (a oneof: written even when 0 or false).
SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"
#: SessionEndInfo's Status.
STATUS_SUCCESS, STATUS_FAILURE = 1, 2
#: The tensor the plugin's own writer puts beside its data: a float of shape [0].
_NULL_TENSOR = _int(1, _DT_FLOAT) + _len(2, _len(2, b""))


def _hparam_value(value: bool | float | str) -> bytes:
    if isinstance(value, bool):
        return _int(4, int(value))
    if isinstance(value, (int, float)):
        return _double(2, float(value))
    return _text(3, str(value))


def _hparams_event(wall_time: float, tag: str, plugin_data: bytes) -> bytes:
    value = _text(1, tag) + _len(8, _NULL_TENSOR) + _plugin("hparams", plugin_data)
    return _event(wall_time, 0, _len(5, _len(1, value)))


def session_start_event(wall_time: float, hparams: dict, *, group: str) -> bytes:
    """The run's hyperparameters (bool, number or text each), as the hparams plugin reads
    them; ``group`` names the session in its table."""
    entries = b"".join(_len(1, _text(1, name) + _len(2, _hparam_value(hparams[name])))
                       for name in sorted(hparams))
    start = entries + _text(4, group) + _double(5, wall_time)
    return _hparams_event(wall_time, SESSION_START_TAG, _len(3, start))


def session_end_event(wall_time: float, status: int) -> bytes:
    """How the run ended, for the hparams plugin: ``STATUS_SUCCESS`` or ``STATUS_FAILURE``."""
    end = _int(1, status) + _double(2, wall_time)
    return _hparams_event(wall_time, SESSION_END_TAG, _len(4, end))
