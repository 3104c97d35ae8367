"""Banned addresses dropped by the kernel, before a connection exists.

A classic BPF socket filter on a listening TCP socket sees every packet the socket receives,
connection requests included; a SYN it drops never becomes a connection, so a banned peer's
flood costs the process no ``accept``, no descriptor and no CPU (the peer's own kernel retries
its SYN in vain). Linux only; IPv4 sources only (an IPv6 peer is still closed at ``accept``).

    >>> drop_sources(listener, ["10.0.0.66"])
    True
"""

from __future__ import annotations

import ctypes
import ipaddress
import socket
import sys
from collections.abc import Sequence

#: ``SO_ATTACH_FILTER`` (asm-generic/socket.h).
SO_ATTACH_FILTER = 26
#: Two instructions per address within BPF's 4,096.
MAX_ADDRESSES = 2000
#: BPF's offset of the network header for loads relative to it (``SKF_NET_OFF``).
_NET = 0xFFF00000
_LD_W_ABS, _LD_B_ABS, _RSH_K, _JEQ_K, _RET_K = 0x20, 0x30, 0x74, 0x15, 0x06
_ACCEPT, _DROP = 0xFFFFFFFF, 0


class _Insn(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def program(addresses: Sequence[str]) -> list[tuple[int, int, int, int]]:
    """The filter: IPv4 packets from ``addresses`` dropped, everything else kept (the first
    ``MAX_ADDRESSES`` IPv4 addresses; others are ignored)."""
    v4 = [int(a) for a in (_v4(x) for x in addresses) if a is not None][:MAX_ADDRESSES]
    insns = [
        (_LD_B_ABS, 0, 0, _NET),  # the IP version nibble
        (_RSH_K, 0, 0, 4),
        (_JEQ_K, 1, 0, 4),  # IPv4: on to the source address
        (_RET_K, 0, 0, _ACCEPT),
        (_LD_W_ABS, 0, 0, _NET + 12),  # the IPv4 source address
    ]
    for a in v4:
        insns += [(_JEQ_K, 0, 1, a), (_RET_K, 0, 0, _DROP)]
    insns.append((_RET_K, 0, 0, _ACCEPT))
    return insns


def drop_sources(sock: socket.socket, addresses: Sequence[str]) -> bool:
    """Replaces ``sock``'s filter with one dropping IPv4 ``addresses``; False where the
    platform has none (not Linux) or the kernel refuses it."""
    if not sys.platform.startswith("linux"):
        return False
    insns = program(addresses)
    array = (_Insn * len(insns))(*(_Insn(*i) for i in insns))
    prog = _Prog(len(insns), ctypes.cast(array, ctypes.POINTER(_Insn)))
    try:  # the kernel copies the program during the call
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(memoryview(prog)))
    except OSError:
        return False
    return True


def _v4(address: str) -> ipaddress.IPv4Address | None:
    try:
        a = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(a, ipaddress.IPv6Address):
        return a.ipv4_mapped
    return a
