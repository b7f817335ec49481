"""The two framings on an NRI socket, as pure byte handling (no sockets, no threads).

NRI runs ttrpc over one unix socket shared by two logical connections (containerd/nri
``pkg/net/multiplex``):

- **Trunk frames** (the multiplexer): an 8-byte header, the logical connection's id then the payload's
  length, both big-endian ``uint32``, then the payload. Each logical connection is a byte stream: a
  payload is a chunk of it, not a message; the writer splits at 4 MiB + 10 bytes. Connection 1 carries
  the Plugin service (the plugin serves, the runtime calls), connection 2 the Runtime service (the runtime
  serves, the plugin calls). Id 0 is reserved.
- **ttrpc messages** (containerd/ttrpc ``channel.go``), inside one logical connection's stream: a 10-byte
  header, the payload's length (``uint32``), the stream id (``uint32``), the message type (1 request, 2
  response, 3 data) and flags (one byte each), then the payload (a protobuf ``Request`` or ``Response``).
  A caller numbers its streams with odd ids, increasing; the answer carries the request's id.

Both decoders take bytes as they arrive, in pieces of any size, and give back whole frames or messages;
a header that announces more than the limit is an error (the peer is not speaking this protocol, or
garbage arrived), raised as ``FramingError`` so the connection can be closed with a reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "FLAG_NO_DATA",
    "FLAG_REMOTE_CLOSED",
    "FLAG_REMOTE_OPEN",
    "MAX_MESSAGE",
    "MAX_TRUNK_PAYLOAD",
    "MESSAGE_HEADER",
    "PLUGIN_CONN",
    "RUNTIME_CONN",
    "TRUNK_HEADER",
    "TYPE_DATA",
    "TYPE_REQUEST",
    "TYPE_RESPONSE",
    "FrameDecoder",
    "FramingError",
    "Message",
    "MessageDecoder",
    "encode_frames",
    "encode_message",
]

PLUGIN_CONN = 1
"""The logical connection of the Plugin service (the runtime calls the plugin)."""
RUNTIME_CONN = 2
"""The logical connection of the Runtime service (the plugin calls the runtime)."""

TRUNK_HEADER = struct.Struct(">II")
MESSAGE_HEADER = struct.Struct(">IIBB")
MAX_MESSAGE = 4 << 20
"""ttrpc's largest message payload (``messageLengthMax``)."""
MAX_TRUNK_PAYLOAD = MESSAGE_HEADER.size + MAX_MESSAGE
"""The multiplexer's largest frame payload: a whole largest ttrpc message fits in one."""

TYPE_REQUEST = 1
TYPE_RESPONSE = 2
TYPE_DATA = 3
FLAG_REMOTE_CLOSED = 0x1
FLAG_REMOTE_OPEN = 0x2
FLAG_NO_DATA = 0x4


class FramingError(Exception):
    """Bytes that are not this protocol (a length over the limit, a reserved connection id)."""


def encode_frames(conn_id: int, data: bytes) -> bytes:
    """``data`` as trunk frames of logical connection ``conn_id`` (one frame unless it is over the limit)."""
    if conn_id <= 0:
        raise ValueError(f"connection id {conn_id} is reserved or invalid")
    if not data:
        return b""
    out = bytearray()
    for start in range(0, len(data), MAX_TRUNK_PAYLOAD):
        chunk = data[start : start + MAX_TRUNK_PAYLOAD]
        out += TRUNK_HEADER.pack(conn_id, len(chunk))
        out += chunk
    return bytes(out)


class FrameDecoder:
    """Trunk bytes in, ``(connection id, payload)`` out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        out: list[tuple[int, bytes]] = []
        while len(self._buf) >= TRUNK_HEADER.size:
            conn_id, length = TRUNK_HEADER.unpack_from(self._buf)
            if length > MAX_TRUNK_PAYLOAD:
                raise FramingError(f"trunk frame of {length} bytes on connection {conn_id}: over the limit")
            if conn_id == 0:
                raise FramingError("trunk frame on the reserved connection 0")
            end = TRUNK_HEADER.size + length
            if len(self._buf) < end:
                break
            out.append((conn_id, bytes(self._buf[TRUNK_HEADER.size : end])))
            del self._buf[:end]
        return out

    @property
    def pending(self) -> int:
        """Bytes held for an incomplete frame (a peer that hangs up mid-frame leaves some)."""
        return len(self._buf)


@dataclass(frozen=True, slots=True)
class Message:
    """One ttrpc message."""

    stream_id: int
    type: int
    flags: int
    payload: bytes


def encode_message(stream_id: int, msg_type: int, payload: bytes, flags: int = 0) -> bytes:
    if len(payload) > MAX_MESSAGE:
        raise FramingError(f"ttrpc message of {len(payload)} bytes: over the {MAX_MESSAGE}-byte limit")
    return MESSAGE_HEADER.pack(len(payload), stream_id, msg_type, flags) + payload


class MessageDecoder:
    """One logical connection's bytes in, ttrpc ``Message``s out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        self._buf += data
        out: list[Message] = []
        while len(self._buf) >= MESSAGE_HEADER.size:
            length, stream_id, msg_type, flags = MESSAGE_HEADER.unpack_from(self._buf)
            if length > MAX_MESSAGE:
                raise FramingError(f"ttrpc message of {length} bytes on stream {stream_id}: over the limit")
            end = MESSAGE_HEADER.size + length
            if len(self._buf) < end:
                break
            out.append(Message(stream_id, msg_type, flags, bytes(self._buf[MESSAGE_HEADER.size : end])))
            del self._buf[:end]
        return out

    @property
    def pending(self) -> int:
        return len(self._buf)
