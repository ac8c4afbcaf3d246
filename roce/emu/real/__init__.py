"""The emulator over real links: an event loop on wall time (``loop``), what every driver
does (``driver``), raw Ethernet (``raw``, with ``arp``) and kernel UDP (``udp``) transports,
an impairing relay (``relay``), the out-of-band setup (``oob``), runs across a link
(``remote``) and the responder service behind ``roce target`` (``target``).
"""
