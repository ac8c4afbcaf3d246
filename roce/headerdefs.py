"""Header layouts in Construct: the one place where the field names, widths and order of RoCE's
headers (and native InfiniBand's LRH) are written.

Each header is a flat ``BitStruct`` of integer fields.  Field names are Wireshark's (without the
``infiniband.`` prefix), so ``bth.destqp`` here is ``infiniband.bth.destqp`` in tshark; each
field's Construct docstring is its display name.

``roce.headers`` derives the layouts (bit offsets, shifts, masks) from these definitions and
keeps a record of them (``roce/_layoutrecord.py``, checked against this file's hash), so that
a program that only builds and reads frames starts without importing Construct.
"""

from __future__ import annotations

from construct import BitsInteger, BitStruct, Construct, ExprAdapter, Flag

from roce.addresses import CONVERTERS

MacAddress = ExprAdapter(BitsInteger(48), *CONVERTERS["mac"])
IPv4Address = ExprAdapter(BitsInteger(32), *CONVERTERS["ipv4"])
IPv6Address = ExprAdapter(BitsInteger(128), *CONVERTERS["ipv6"])
# adapter -> the kind of address it holds (roce.addresses.CONVERTERS)
ADDRESS_KINDS: dict[int, str] = {id(MacAddress): "mac", id(IPv4Address): "ipv4",
                                 id(IPv6Address): "ipv6"}

U = BitsInteger

# -- L2 / L3 / L4 ------------------------------------------------------------------------------

ETH = BitStruct(
    "dst" / MacAddress * "Destination",
    "src" / MacAddress * "Source",
    "type" / U(16) * "Type",
)
VLAN = BitStruct(
    "priority" / U(3) * "Priority",
    "dei" / U(1) * "DEI",
    "id" / U(12) * "ID",
    "etype" / U(16) * "Type",
)
# Linux cooked captures (libpcap LINKTYPE_LINUX_SLL / SLL2): only what we need to find L3.
SLL = BitStruct(
    "pkttype" / U(16) * "Packet type",
    "hatype" / U(16) * "Link-layer address type",
    "halen" / U(16) * "Link-layer address length",
    "src" / U(64) * "Source",
    "etype" / U(16) * "Protocol",
)
SLL2 = BitStruct(
    "etype" / U(16) * "Protocol",
    "reserved" / U(16) * "Reserved",
    "ifindex" / U(32) * "Interface index",
    "hatype" / U(16) * "Link-layer address type",
    "pkttype" / U(8) * "Packet type",
    "halen" / U(8) * "Link-layer address length",
    "src" / U(64) * "Source",
)

IPV4 = BitStruct(
    "version" / U(4) * "Version",
    "ihl" / U(4) * "Header Length",
    "dsfield.dscp" / U(6) * "Differentiated Services Codepoint",
    "dsfield.ecn" / U(2) * "Explicit Congestion Notification",
    "len" / U(16) * "Total Length",
    "id" / U(16) * "Identification",
    "flags.rb" / U(1) * "Reserved bit",
    "flags.df" / U(1) * "Don't fragment",
    "flags.mf" / U(1) * "More fragments",
    "frag_offset" / U(13) * "Fragment Offset",
    "ttl" / U(8) * "Time to Live",
    "proto" / U(8) * "Protocol",
    "checksum" / U(16) * "Header Checksum",
    "src" / IPv4Address * "Source Address",
    "dst" / IPv4Address * "Destination Address",
)
IPV6 = BitStruct(
    "version" / U(4) * "Version",
    "tclass" / U(8) * "Traffic Class",
    "flow" / U(20) * "Flow Label",
    "plen" / U(16) * "Payload Length",
    "nxt" / U(8) * "Next Header",
    "hlim" / U(8) * "Hop Limit",
    "src" / IPv6Address * "Source Address",
    "dst" / IPv6Address * "Destination Address",
)
UDP = BitStruct(
    "srcport" / U(16) * "Source Port",
    "dstport" / U(16) * "Destination Port",
    "length" / U(16) * "Length",
    "checksum" / U(16) * "Checksum",
)
# RoCEv1 Global Route Header (IBA 8.3); GIDs shown as IPv6 addresses, as tools do.
GRH = BitStruct(
    "ipver" / U(4) * "IP Version",
    "tclass" / U(8) * "Traffic Class",
    "flowlabel" / U(20) * "Flow Label",
    "paylen" / U(16) * "Payload Length",
    "nxthdr" / U(8) * "Next Header",
    "hoplmt" / U(8) * "Hop Limit",
    "sgid" / IPv6Address * "Source GID",
    "dgid" / IPv6Address * "Destination GID",
)

# Native InfiniBand Local Route Header (IBA 7.7).  Not one of RoCE's headers (it stays out of
# HEADERS and LAYOUTS): roce.families.ib.native decodes it; the structural walk (roce.locate,
# the fast path) reads LNH and PktLen from LRH_LAYOUT to find BTH in a link type 247 packet.
LRH = BitStruct(
    "vl" / U(4) * "Virtual Lane",
    "lver" / U(4) * "Link Version",
    "sl" / U(4) * "Service Level",
    "reserved2" / U(2) * "Reserved (2 bits)",
    "lnh" / U(2) * "Link Next Header",
    "dlid" / U(16) * "Destination Local ID",
    "reserved5" / U(5) * "Reserved (5 bits)",
    "pktlen" / U(11) * "Packet Length",
    "slid" / U(16) * "Source Local ID",
)

# -- InfiniBand transport headers (IBA 9.2, 9.3) ------------------------------------------------

BTH = BitStruct(
    "opcode" / U(8) * "Opcode",
    "se" / Flag * "Solicited Event",
    "m" / Flag * "MigReq",
    "padcnt" / U(2) * "Pad Count",
    "tver" / U(4) * "Header Version",
    "p_key" / U(16) * "Partition Key",
    "fecn" / Flag * "FECN",
    "becn" / Flag * "BECN",
    "reserved" / U(6) * "Reserved (6 bits)",
    "destqp" / U(24) * "Destination Queue Pair",
    "a" / Flag * "Acknowledge Request",
    "reserved7" / U(7) * "Reserved (7 bits)",
    "psn" / U(24) * "Packet Sequence Number",
)
RDETH = BitStruct(
    "reserved" / U(8) * "Reserved",
    "eecnxt" / U(24) * "E2E Context",
)
DETH = BitStruct(
    "q_key" / U(32) * "Queue Key",
    "reserved" / U(8) * "Reserved",
    "srcqp" / U(24) * "Source Queue Pair",
)
RETH = BitStruct(
    "va" / U(64) * "Virtual Address",
    "r_key" / U(32) * "Remote Key",
    "dmalen" / U(32) * "DMA Length",
)
ATOMICETH = BitStruct(
    "va" / U(64) * "Virtual Address",
    "r_key" / U(32) * "Remote Key",
    "swapdt" / U(64) * "Swap (Or Add) Data",
    "cmpdt" / U(64) * "Compare Data",
)
AETH = BitStruct(
    "syndrome" / U(8) * "Syndrome",
    "msn" / U(24) * "Message Sequence Number",
)
ATOMICACKETH = BitStruct(
    "origremdt" / U(64) * "Original Remote Data",
)
IMMDT = BitStruct(
    "immdt" / U(32) * "Immediate Data",
)
IETH = BitStruct(
    "ieth" / U(32) * "RKey",
)  # the R_Key to invalidate; Wireshark: infiniband.ieth
XRCETH = BitStruct(
    "reserved" / U(8) * "Reserved",
    "xrcsrq" / U(24) * "XRC Target SRQ",
)
FETH = BitStruct(
    "reserved" / U(26) * "Reserved",
    "sel" / U(2) * "Selectivity Level",
    "plt" / U(4) * "Placement Type",
)
CNP = BitStruct(
    "reserved" / U(128) * "Reserved",
)

# Each field carries its display name (Wireshark's, where Wireshark has the field) as its
# Construct docstring: the decoder's tree reads it from LAYOUTS.

# Header name (the field-name prefix) -> definition.  Opcode rows name headers by these keys.
HEADERS: dict[str, Construct] = {
    "eth": ETH, "vlan": VLAN, "sll": SLL, "sll2": SLL2, "ip": IPV4, "ipv6": IPV6, "udp": UDP,
    "grh": GRH, "bth": BTH, "rdeth": RDETH, "deth": DETH, "reth": RETH,
    "atomiceth": ATOMICETH, "aeth": AETH, "atomicacketh": ATOMICACKETH, "immdt": IMMDT,
    "ieth": IETH, "xrceth": XRCETH, "feth": FETH, "cnp": CNP,
}

# What roce.headers records and derives: every definition above by layout name.
DEFINITIONS: dict[str, Construct] = {**HEADERS, "lrh": LRH}
