"""The emulator core, sans-I/O: queue pairs as state machines ``(now, event) -> (frames,
completions, timers)`` in the manner of Linux rxe (``qp``, ``requester``, ``responder``,
``completer``, UC/UD in ``unreliable``), loss recovery (``recovery``, ``selective``, ``rack``),
memory and keys (``memory``, ``placement``), the device and its verbs API (``device``,
``verbs``, ``work``, ``constants``, ``states``), the frames a QP sends (``frames``), workload
buffers (``payload``) and the ``Endpoint`` interface a link delivers to (``endpoint``).

Nothing here reads a clock, opens a socket or draws from a random generator it was not
handed: every entry point takes ``now`` in integer nanoseconds.
"""
