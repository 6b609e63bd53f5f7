"""Fixed channels between hosts: authenticated TCP connections that carry arrays as bytes.

Ray places the actors and watches them; the values a plan moves between hosts go over
connections opened once, when a plan's stages are wired, and kept for every run. A Ray
actor call costs about 1.1-1.5 ms and some 6 ms of the cluster's CPU time per input of a
two-stage plan (measured on a 2-core machine); a message on an open connection costs the
bytes it carries and a thread's wake-up.

A **message** is one input's values from one sender (``tag`` numbers the input): a JSON
header, then each array's bytes as they lie in memory. Nothing is pickled, and what is
read is checked: the header's fields and types, each dtype (numbers, booleans or
fixed-width text only) and each payload's size against its shape. A connection opens with
:mod:`multiprocessing.connection`'s HMAC handshake on a key the plan's driver made, and
names its sender in a first message.

An :class:`Inbox` listens on one host: each connection it accepts is drained by a thread
of its own into one queue, so a sender never waits on a receiver that is itself sending.
A sender whose connection ends leaves a :class:`Closed` in the queue, naming it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import numpy as np

from autopart.errors import AutopartError

_CARRIED_KINDS = "biufc?U"  # numbers, booleans and fixed-width text: bytes as they lie
_HEADER_LIMIT = 1 << 24  # a header larger than this is damage, not a message
_LENGTH = struct.Struct("!Q")  # each frame's length, before its bytes


class ChannelError(AutopartError):
    """A message that cannot be sent as asked, or that came back damaged."""


@dataclass
class Message:
    """One input's values from one sender; ``error`` instead where its stage failed."""

    sender: str
    tag: int
    values: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Closed:
    """The connection from ``sender`` ended (its host stopped, or it closed it)."""

    sender: str
    reason: str


def _carried(name: str, value: Any) -> np.ndarray:
    """``value`` as a contiguous array a channel carries; :class:`ChannelError` otherwise."""
    array = np.asarray(value)
    if array.dtype.kind == "O" and all(isinstance(item, str) for item in array.flat):
        array = array.astype(str)
    if array.dtype.kind not in _CARRIED_KINDS:
        raise ChannelError(
            f"the value {name!r} is of dtype {array.dtype}, which a channel between hosts "
            "does not carry (numbers, booleans and text only)"
        )
    return array if array.flags.c_contiguous else array.copy(order="C")  # keeps a 0-d shape


class Channel:
    """One authenticated connection, read and written as frames: a length, then its bytes.

    Made from a :class:`~multiprocessing.connection.Connection` once its handshake is
    done, it takes over the socket. Frames are received straight into the caller's buffer
    (:meth:`recv_bytes_into`): one copy from the kernel, where a ``Connection`` reads
    chunks into a buffer of its own first (64 MB between two local Ray nodes: 0.75 GB/s
    that way, about 2 GB/s this way). Writes go out at once, not held for Nagle's timer.
    """

    def __init__(self, connection: Connection) -> None:
        self._socket = socket.socket(fileno=os.dup(connection.fileno()))
        connection.close()
        with contextlib.suppress(OSError):
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_bytes(self, data: bytes | memoryview) -> None:
        """Send one frame of ``data``."""
        view = memoryview(data).cast("B")
        self._socket.sendall(_LENGTH.pack(len(view)))
        if len(view):
            self._socket.sendall(view)

    def _fill(self, view: memoryview) -> None:
        while len(view):
            got = self._socket.recv_into(view)
            if not got:
                raise EOFError("the channel was closed")
            view = view[got:]

    def _length(self) -> int:
        header = bytearray(_LENGTH.size)
        self._fill(memoryview(header))
        return int(_LENGTH.unpack(header)[0])

    def recv_bytes(self, limit: int) -> bytes:
        """The next frame; ``ValueError`` where it is longer than ``limit`` bytes."""
        length = self._length()
        if length > limit:
            raise ValueError(f"a frame of {length} bytes, over {limit}")
        data = bytearray(length)
        self._fill(memoryview(data))
        return bytes(data)

    def recv_bytes_into(self, buffer: memoryview) -> int:
        """Read the next frame into ``buffer``; ``ValueError`` where its length differs."""
        return self.recv_frame_into(lambda length: buffer if length == len(buffer) else None)

    def recv_frame_into(self, make: Callable[[int], memoryview | None]) -> int:
        """Read the next frame into the buffer ``make`` gives for its length (its bytes).

        ``make`` returns None to refuse that length (``ValueError``), before anything the
        frame would fill is made: a damaged length never asks for its memory.
        """
        length = self._length()
        buffer = make(length)
        if buffer is None or len(buffer) != length:
            raise ValueError(f"a frame of {length} bytes, not the size its header gave")
        self._fill(buffer)
        return length

    def close(self) -> None:
        """Close the socket (the other end then reads the end of the channel)."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def send(
    connection: Channel,
    tag: int,
    values: Mapping[str, Any],
    error: str | None = None,
) -> None:
    """Send one message: ``values`` for input ``tag`` (or ``error``) over ``connection``.

    :class:`ChannelError` for a value a channel does not carry; ``OSError`` where the
    connection is gone.
    """
    arrays = {name: _carried(name, value) for name, value in values.items()}
    header = {
        "tag": tag,
        "error": error,
        "values": [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()],
    }
    connection.send_bytes(json.dumps(header).encode())
    for array in arrays.values():
        connection.send_bytes(memoryview(array).cast("B") if array.size else b"")


def receive(connection: Channel, sender: str) -> Message:
    """Read one message from ``connection``, checked; :class:`ChannelError` where damaged.

    ``EOFError`` or ``OSError`` where the connection ended.
    """
    try:
        header = json.loads(connection.recv_bytes(_HEADER_LIMIT))
        tag, error, described = header["tag"], header["error"], header["values"]
        if not isinstance(tag, int) or not isinstance(described, list):
            raise TypeError("tag or values of the wrong type")
        if error is not None and not isinstance(error, str):
            raise TypeError("error of the wrong type")
        values = {}
        for name, dtype_text, shape in described:
            values[str(name)] = _received_array(connection, str(name), str(dtype_text), shape)
    except (ValueError, TypeError, KeyError) as damage:
        raise ChannelError(f"a damaged message from {sender}: {damage}") from None
    return Message(sender, tag, values, error)


def _received_array(connection: Channel, name: str, dtype_text: str, shape: Any) -> np.ndarray:
    """The next payload on ``connection``, as the array its header describes.

    The frame's length is checked against the header's shape before the array is made.
    """
    dtype = np.dtype(dtype_text)
    if dtype.kind not in _CARRIED_KINDS or not isinstance(shape, list):
        raise TypeError(f"{name!r}: dtype {dtype_text} or shape {shape!r} not carried")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise TypeError(f"{name!r}: shape {shape!r}")
    nbytes = math.prod(shape) * dtype.itemsize
    made: list[np.ndarray] = []

    def make(length: int) -> memoryview | None:
        if length != nbytes:
            return None
        made.append(np.empty(shape, dtype))
        return memoryview(made[0]).cast("B") if nbytes else memoryview(b"")

    connection.recv_frame_into(make)
    return made[0]


def dial(address: tuple[str, int], authkey: bytes) -> Channel:
    """A channel to the :class:`Inbox` at ``address``, once the handshake on ``authkey`` passed.

    ``AuthenticationError`` where the inbox holds another key.
    """
    return Channel(Client(address, authkey=authkey))


def connect(address: tuple[str, int], authkey: bytes, sender: str) -> Channel:
    """A channel to the :class:`Inbox` at ``address``, introduced as ``sender``."""
    channel = dial(address, authkey)
    channel.send_bytes(json.dumps({"sender": sender}).encode())
    return channel


class Inbox:
    """A listener on this host whose connections are each drained into one queue.

    ``host_address`` is the address other hosts reach this one at. :meth:`get` returns
    the next :class:`Message` or :class:`Closed`, in the order they arrived.
    """

    def __init__(self, host_address: str, authkey: bytes) -> None:
        self._listener = Listener((host_address, 0), authkey=authkey)
        self.address: tuple[str, int] = self._listener.address
        self._queue: queue.Queue[Message | Closed] = queue.Queue()
        self._connections: list[Channel] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection = self._listener.accept()
            except (AuthenticationError, EOFError, ConnectionError):
                continue  # a handshake that failed: that sender sees it, others may come
            except OSError:
                return  # the listener was closed
            if self._closed:
                connection.close()
                return
            channel = Channel(connection)
            self._connections.append(channel)
            threading.Thread(target=self._drain, args=(channel,), daemon=True).start()

    def _drain(self, connection: Channel) -> None:
        sender = "an unnamed sender"
        try:
            hello = json.loads(connection.recv_bytes(_HEADER_LIMIT))
            sender = str(hello["sender"])
            while True:
                self._queue.put(receive(connection, sender))
        except (EOFError, OSError) as ended:
            self._queue.put(Closed(sender, type(ended).__name__))
        except (ChannelError, ValueError, KeyError, TypeError) as damage:
            self._queue.put(Closed(sender, str(damage)))
        finally:
            connection.close()

    def get(self, timeout: float | None = None) -> Message | Closed:
        """The next message or closed connection; ``queue.Empty`` after ``timeout`` seconds."""
        return self._queue.get(timeout=timeout)

    def close(self) -> None:
        """Stop listening and close every connection accepted (their threads then end)."""
        self._closed = True
        with contextlib.suppress(OSError), socket.create_connection(self.address, timeout=1):
            pass  # wakes the accepting thread, which then sees the inbox closed
        with contextlib.suppress(OSError):
            self._listener.close()
        for connection in self._connections:
            connection.close()
