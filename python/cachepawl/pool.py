"""Device pool descriptions (vocab/device_pool.h) from raw addresses.

An engine that keeps its own KV and state tensors describes them to the store once, before any
load or save: per attention layer the K and V base addresses and page strides (or one
interleaved [num_pages, 2, page, heads, dim] tensor), per SSM layer the conv and SSM state
bases and slot strides; or one block-contiguous pool whose page p is the whole KV record at
kv_base + p * page_stride. Addresses are device pointers (host pointers for device -1, CPU
mode); the store never frees them, and the memory must outlive the store (or its close).

With PyTorch tensors, use ``Store.register_tensors`` (cachepawl.torch_pool), which derives
the addresses, strides and device from the tensors and checks their dtypes and shapes.

A :class:`DevicePool` is used by one thread at a time; it is copied at registration and may be
dropped afterwards.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Tuple

from . import _convert, _lib
from .errors import InvalidArgument, check

lib = _lib.lib


def _ptr(name: str, address: Any) -> Any:
    """An address argument (int; 0 is NULL, which the setters reject naming the argument)."""
    return _convert.u64(name, address) or None


def buffer_address(buffer: Any) -> int:
    """The address of a writable, contiguous Python buffer (bytearray, writable memoryview,
    ctypes array, numpy array), e.g. for a CPU-mode pool in host memory. The caller keeps the
    buffer alive (and unresized) while the store may use it."""
    mv = memoryview(buffer)
    if mv.readonly or not mv.c_contiguous or mv.nbytes == 0:
        raise InvalidArgument(
            "buffer: must be writable, C-contiguous and non-empty to hold a device pool"
        )
    return ctypes.addressof(ctypes.c_char.from_buffer(mv.cast("B")))


class DevicePool(_lib.Owner):
    """An engine's device pool: `num_pages` KV page slots and `num_state_slots` state slots in
    the memory of CUDA device `device` (-1: host memory, CPU mode). Strides are bytes; a
    stride of 0 means packed (the bytes of one slot). Setters return the pool (chainable)."""

    def __init__(self, num_pages: int, num_state_slots: int = 0, device: int = -1) -> None:
        h = _lib.PoolP()
        check(
            lib.cachepawl_pool_new(
                _convert.i32("device", device),
                _convert.u64("num_pages", num_pages),
                _convert.u64("num_state_slots", num_state_slots),
                ctypes.byref(h),
            )
        )
        self._own(h, lib.cachepawl_pool_free)
        self.device = device
        self.num_pages = num_pages
        self.num_state_slots = num_state_slots
        #: Objects that own the described memory; the store keeps them alive once registered.
        self.owners: List[Any] = []

    def _set_layer(self, fn: Any, i: int, *named: Tuple[str, int]) -> "DevicePool":
        """fn(pool, i, base, stride, base, stride) with each (name, value) range-checked."""
        (b1, v1), (s1, w1), (b2, v2), (s2, w2) = named
        check(
            fn(
                self._h,
                _convert.size("i", i),
                _ptr(b1, v1),
                _convert.u64(s1, w1),
                _ptr(b2, v2),
                _convert.u64(s2, w2),
            )
        )
        return self

    def set_kv_layer(
        self, i: int, k_base: int, k_page_stride: int, v_base: int, v_page_stride: int
    ) -> "DevicePool":
        """Attention layer i with K and V separate: page p's K at k_base + p * k_page_stride."""
        return self._set_layer(
            lib.cachepawl_pool_set_kv_layer,
            i,
            ("k_base", k_base),
            ("k_page_stride", k_page_stride),
            ("v_base", v_base),
            ("v_page_stride", v_page_stride),
        )

    def set_kv_layer_interleaved(self, i: int, base: int, page_stride: int) -> "DevicePool":
        """Attention layer i with K and V interleaved per page ([num_pages, 2, page, heads,
        dim]): V = K + K bytes per page."""
        check(
            lib.cachepawl_pool_set_kv_layer_interleaved(
                self._h,
                _convert.size("i", i),
                _ptr("base", base),
                _convert.u64("page_stride", page_stride),
            )
        )
        return self

    def set_ssm_layer(
        self,
        i: int,
        conv_base: Optional[int],
        conv_slot_stride: int,
        ssm_base: Optional[int],
        ssm_slot_stride: int,
    ) -> "DevicePool":
        """SSM layer i: slot s's conv state at conv_base + s * conv_slot_stride, its SSM state
        at ssm_base + s * ssm_slot_stride. A shortconv layer (no SSM state) takes ssm_base
        None (or 0), a lightning layer (no conv state) conv_base None; any other layer's
        missing base is refused at registration."""
        return self._set_layer(
            lib.cachepawl_pool_set_ssm_layer,
            i,
            ("conv_base", 0 if conv_base is None else conv_base),
            ("conv_slot_stride", conv_slot_stride),
            ("ssm_base", 0 if ssm_base is None else ssm_base),
            ("ssm_slot_stride", ssm_slot_stride),
        )

    def set_block_contiguous(
        self, kv_base: int, page_stride: int = 0, state_base: int = 0, state_stride: int = 0
    ) -> "DevicePool":
        """Block-contiguous instead of per-layer: page p is the whole KV record (page-first
        order) at kv_base + p * page_stride, state s the whole state record at
        state_base + s * state_stride. Exclusive with the per-layer setters."""
        check(
            lib.cachepawl_pool_set_block_contiguous(
                self._h,
                _ptr("kv_base", kv_base),
                _convert.u64("page_stride", page_stride),
                _ptr("state_base", state_base),
                _convert.u64("state_stride", state_stride),
            )
        )
        return self

    def __repr__(self) -> str:
        return (
            f"<cachepawl.DevicePool device={self.device} num_pages={self.num_pages} "
            f"num_state_slots={self.num_state_slots}>"
        )
