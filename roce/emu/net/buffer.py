"""A switch's shared packet buffer (the MMU): reserves, a dynamic threshold, PFC headroom;
its interface is ``BufferPolicy``, the class every buffer model subclasses.

The buffer of ``size`` bytes is carved into (ns-3 HPCC ``switch-mmu.cc`` practice, facts in
the package docstring):

- a reserve of ``reserve`` bytes for every (port, class) account in use: lossless classes
  are accounted at their ingress port (that is what PFC pauses), lossy ones at their egress
  queue;
- PFC headroom per (ingress port, lossless class): rate x 2 x delay + 2 frames + the pause
  frame, the most that can still arrive after the switch decides to pause;
- the shared pool: the rest.  An account may hold shared bytes up to the dynamic threshold
  ``alpha x free shared bytes``.

A lossy frame that fits neither its reserve nor the threshold is tail-dropped.  A lossless
frame above the threshold makes the ingress port send XOFF; while paused its frames land in
headroom; a lossless frame that finds even the headroom full is dropped and counted (it
never happens when headroom is sized right, which the tests check).
"""

from __future__ import annotations

from dataclasses import dataclass

from roce.emu import defaults

RESERVE, SHARED, HEADROOM = 0, 1, 2
PFC_FRAME = 64  # a MAC Control frame on the wire (minimum Ethernet frame)


class Account:
    """Bytes one (port, class) holds, by pool, and its PFC state."""

    __slots__ = ("held", "xoff", "headroom")

    def __init__(self, headroom: int = 0) -> None:
        self.held = [0, 0, 0]  # by pool: RESERVE, SHARED, HEADROOM
        self.xoff = False
        self.headroom = headroom

    @property
    def total(self) -> int:
        return sum(self.held)

    def congested(self) -> bool:
        """Still above the pause threshold (PFC's refresh asks; ``PfcSender.xoff``)."""
        return self.xoff


def headroom_bytes(rate_gbps: float, delay_ns: int, max_frame: int) -> int:
    """What reaches an ingress port after it decides to pause: a round trip of data at the
    link rate plus a frame finishing at each end plus the pause frame itself."""
    return -(-int(rate_gbps * 2 * delay_ns) // 8) + 2 * max_frame + PFC_FRAME


@dataclass
class BufferConfig:
    """A switch's shared buffer: its size in bytes, the dynamic threshold's ``alpha`` and
    the reserve of every account."""

    size: int = defaults.BUFFER
    alpha: float = 1 / 8
    reserve: int | None = None  # bytes per account; None: one maximum-size frame


class BufferPolicy:
    """What a switch asks of its buffer: admission, release, and when to pause or resume a
    lossless ingress account (the PFC accounting stage).  A buffer model subclasses this and
    overrides every method (the switch calls them per frame: in C in the compiled form,
    where a subclass written in Python is called through its overrides); it keeps the
    counters ``size``, ``max_used`` and ``lossless_drops`` the run reports."""

    __slots__ = ()

    def account(self, headroom: int = 0) -> Account:
        """A new (port, class) account with ``headroom`` bytes of PFC headroom."""
        raise NotImplementedError

    def check(self, where: str) -> None:
        """Refuse (``UsageError``, naming ``where``) a buffer its accounts leave unusable."""
        raise NotImplementedError

    def admit(self, acct: Account, n: int, lossless: bool) -> int:
        """The pool a frame of ``n`` bytes goes to, or -1: drop it."""
        raise NotImplementedError

    def release(self, acct: Account, pool: int, n: int) -> None:
        """A frame of ``n`` bytes admitted to ``pool`` left."""
        raise NotImplementedError

    def should_pause(self, acct: Account) -> bool:
        raise NotImplementedError

    def should_resume(self, acct: Account) -> bool:
        raise NotImplementedError

    def queue_limit(self) -> int:
        """The bytes one account can hold before the buffer stops it (tail drop, or PFC for
        a lossless class) when it is the only one using the shared pool."""
        raise NotImplementedError

    def pfc_trigger(self, fan_in: int) -> int:
        """The egress queue at which ``fan_in`` lossless ingress ports feeding it, alike and
        alone in the shared pool, make the switch pause them."""
        raise NotImplementedError


class SharedBuffer(BufferPolicy):
    __slots__ = ("config", "size", "alpha", "reserve", "max_frame", "carved", "shared_size",
                 "shared_used", "used", "max_used", "lossless_drops", "resume_offset")

    def __init__(self, config: BufferConfig, max_frame: int) -> None:
        self.config = config
        self.size = config.size
        self.alpha = config.alpha
        self.reserve = config.reserve if config.reserve is not None else max_frame
        self.max_frame = max_frame
        self.carved = 0  # reserves + headroom
        self.shared_size = self.size
        self.shared_used = 0
        self.used = 0
        self.max_used = 0
        self.lossless_drops = 0
        self.resume_offset = 2 * max_frame

    def account(self, headroom: int = 0) -> Account:
        """A new account: carves its reserve (and headroom) out of the shared pool."""
        self.carved += self.reserve + headroom
        self.shared_size = self.size - self.carved
        return Account(headroom)

    def check(self, where: str) -> None:
        from roce.errors import UsageError

        if self.shared_size < self.max_frame:
            raise UsageError(f"{where}: a buffer of {self.size} bytes is too small: reserves "
                             f"and PFC headroom take {self.carved} bytes (--buffer)")

    def threshold(self) -> float:
        return self.alpha * (self.shared_size - self.shared_used)

    def admit(self, acct: Account, n: int, lossless: bool) -> int:
        """The pool a frame of ``n`` bytes goes to, or -1: drop it."""
        held = acct.held
        m = n  # C integers in the compiled form (once per switch hop): the pools' indices and
        r = RESERVE  # the bytes they hold, read off ``held`` and added in C
        s = SHARED
        h = held[r]
        if h + m <= self.reserve:
            pool = r
        elif (not acct.xoff  # ``threshold()`` inline: this runs once per switch hop
              and self._within_threshold(held[s] + m)
              and self.shared_used + m <= self.shared_size):
            pool = s
            self.shared_used += m
        elif lossless and acct.xoff and held[HEADROOM] + m <= acct.headroom:
            pool = HEADROOM
        elif lossless and not acct.xoff and self.shared_used + m <= self.shared_size:
            pool = s  # above the threshold: admitted, and the caller pauses the sender
            self.shared_used += m
        else:
            if lossless:
                self.lossless_drops += 1
            return -1
        held[pool] += m
        self.used += m
        if self.used > self.max_used:
            self.max_used = self.used
        return pool

    def release(self, acct: Account, pool: int, n: int) -> None:
        m = n  # C integers in the compiled form (once per switch hop)
        p = pool
        acct.held[p] -= m
        self.used -= m
        if p == SHARED:
            self.shared_used -= m

    def should_pause(self, acct: Account) -> bool:
        # ``threshold()`` inline (once per lossless switch hop): C numbers in the compiled form
        h = acct.held[SHARED]
        alpha = self.alpha
        return not acct.xoff and h >= alpha * (self.shared_size - self.shared_used)

    def _within_threshold(self, b: int) -> bool:
        """Whether ``b`` bytes of an account's shared pool are within the dynamic threshold
        (``threshold()``, not below 0; per switch hop: C numbers in the compiled form)."""
        h = b
        alpha = self.alpha
        return h <= max(alpha * (self.shared_size - self.shared_used), 0)

    def should_resume(self, acct: Account) -> bool:
        return (acct.xoff and acct.held[HEADROOM] == 0
                and acct.held[SHARED] <= max(self.threshold() - self.resume_offset, 0))

    def queue_limit(self) -> int:
        # alone in the pool, an account holding x shared bytes is stopped at
        # x = alpha (shared - x), i.e. x = alpha shared / (1 + alpha); plus its reserve
        return self.reserve + int(self.alpha * self.shared_size / (1 + self.alpha))

    def pfc_trigger(self, fan_in: int) -> int:
        # n ingress accounts holding x shared bytes each pause at x = alpha (shared - n x),
        # i.e. x = alpha shared / (1 + n alpha); their frames, reserves included, are the
        # egress queue they feed
        n = max(fan_in, 1)
        return n * (self.reserve + int(self.alpha * self.shared_size / (1 + n * self.alpha)))
