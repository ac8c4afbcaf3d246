"""What native InfiniBand carries above the transport: MADs on QP0/QP1, CM, IPoIB.

* MAD (IBA 13.4.3): the 24-byte common header (base version, management class, class
  version, method, status, class-specific, transaction ID, attribute ID, reserved,
  attribute modifier) at the start of a UD payload to QP0 (SMPs, on VL15) or QP1 (GSI:
  SA, CM, ...).  Shown as Wireshark's Info does: ``SubnGet(SMInfo)``,
  ``SubnAdmGetResp(PathRecord)``.
* Communication Management (IBA 12.6, management class 0x07): REQ, MRA, REJ, REP, RTU,
  DREQ, DREP, with the fields a connection is made of (communication IDs, QPNs, starting
  PSN, path MTU ...).  Field names follow Wireshark's ``infiniband.cm.*``.
* IPoIB (RFC 4391): a 4-byte header (EtherType, reserved) at the start of a UD payload
  to any other QP, then IPv4, IPv6 or ARP.

Layouts are Construct definitions (``roce.headers.define``); names are Wireshark's.
"""

from __future__ import annotations

import socket
from typing import Any

from construct import BitsInteger, BitStruct

from roce.families.base.fields import hex_spec
from roce.headers import define
from roce.locate import Walk
from roce.opcodes import OPCODES, Transport

U = BitsInteger
MAD = BitStruct(
    "baseversion" / U(8) * "Base Version",
    "mgmtclass" / U(8) * "Management Class",
    "classversion" / U(8) * "Class Version",
    "method" / U(8) * "Method",
    "status" / U(16) * "Status",
    "classspecific" / U(16) * "Class Specific",
    "transactionid" / U(64) * "Transaction ID",
    "attributeid" / U(16) * "Attribute ID",
    "reserved" / U(16) * "Reserved",
    "attributemodifier" / U(32) * "Attribute Modifier",
)
MAD_LAYOUT, decode_mad, encode_mad = define("mad", MAD)
MAD_SIZE = MAD_LAYOUT.size
MAD_KEYS = tuple(f"mad.{f.name}" for f in MAD_LAYOUT.fields)
IPOIB = BitStruct("type" / U(16) * "Type", "reserved" / U(16) * "Reserved")
IPOIB_LAYOUT, decode_ipoib, encode_ipoib = define("ipoib", IPOIB)

# CM message bodies (IBA 12.6.5 ff.), from MAD byte 24.  Fields the tree and stats need.
CM_REQ = BitStruct(
    "localcommid" / U(32) * "Local Communication ID",
    "reserved0" / U(32) * "Reserved",
    "serviceid" / U(64) * "ServiceID",
    "localcaguid" / U(64) * "Local CA GUID",
    "reserved1" / U(32) * "Reserved",
    "localqkey" / U(32) * "Local Q_Key",
    "localqpn" / U(24) * "Local QPN",
    "responderres" / U(8) * "Responder Resources",
    "localeecn" / U(24) * "Local EECN",
    "initdepth" / U(8) * "Initiator Depth",
    "remoteeecn" / U(24) * "Remote EECN",
    "remoteresptout" / U(5) * "Remote CM Response Timeout",
    "transpsvctype" / U(2) * "Transport Service Type",
    "e2eflowctrl" / U(1) * "End-to-End Flow Control",
    "startpsn" / U(24) * "Starting PSN",
    "localresptout" / U(5) * "Local CM Response Timeout",
    "retrcount" / U(3) * "Retry Count",
    "pkey" / U(16) * "Partition Key",
    "pppmtu" / U(4) * "Path Packet Payload MTU",
    "rdcexist" / U(1) * "RDC Exists",
    "rnrretrcount" / U(3) * "RNR Retry Count",
    "maxcmretr" / U(4) * "Max CM Retries",
    "srq" / U(1) * "SRQ",
    "ext_transport" / U(3) * "Extended Transport Type",
    "prim_locallid" / U(16) * "Primary Local Port LID",
    "prim_remotelid" / U(16) * "Primary Remote Port LID",
)
CM_REP = BitStruct(
    "localcommid" / U(32) * "Local Communication ID",
    "remotecommid" / U(32) * "Remote Communication ID",
    "localqkey" / U(32) * "Local Q_Key",
    "localqpn" / U(24) * "Local QPN",
    "reserved0" / U(8) * "Reserved",
    "localeecn" / U(24) * "Local EE Context Number",
    "reserved1" / U(8) * "Reserved",
    "startpsn" / U(24) * "Starting PSN",
    "reserved2" / U(8) * "Reserved",
    "respres" / U(8) * "Responder Resources",
    "initdepth" / U(8) * "Initiator Depth",
    "tgtackdelay" / U(5) * "Target ACK Delay",
    "failoveracc" / U(2) * "Failover Accepted",
    "e2eflowctrl" / U(1) * "End-To-End Flow Control",
    "rnrretrcount" / U(3) * "RNR Retry Count",
    "srq" / U(1) * "SRQ",
    "reserved" / U(4) * "Reserved",
    "localcaguid" / U(64) * "Local CA GUID",
)
CM_IDS = BitStruct(
    "localcommid" / U(32) * "Local Communication ID",
    "remotecommid" / U(32) * "Remote Communication ID",
)
CM_DREQ = BitStruct(
    "localcommid" / U(32) * "Local Communication ID",
    "remotecommid" / U(32) * "Remote Communication ID",
    "remoteqpneecn" / U(24) * "Remote QPN/EECN",
    "reserved" / U(8) * "Reserved",
)
CM_REJ = BitStruct(
    "localcommid" / U(32) * "Local Communication ID",
    "remotecommid" / U(32) * "Remote Communication ID",
    "msgrejected" / U(2) * "Message REJected",
    "reserved0" / U(6) * "Reserved",
    "rejectinfolen" / U(7) * "Reject Info Length",
    "reserved1" / U(1) * "Reserved",
    "reason" / U(16) * "Reason",
)
CM_MRA = BitStruct(
    "localcommid" / U(32) * "Local Communication ID",
    "remotecommid" / U(32) * "Remote Communication ID",
    "msgmraed" / U(2) * "Message MRAed",
    "reserved0" / U(6) * "Reserved",
    "servicetimeout" / U(5) * "Service Timeout",
    "reserved1" / U(3) * "Reserved",
)
# attribute ID -> (short name, Wireshark's message key, body)
CM_MESSAGES: dict[int, tuple[str, str, Any]] = {
    0x0010: ("ConnectRequest", "req", CM_REQ), 0x0011: ("MsgRcptAck", "mra", CM_MRA),
    0x0012: ("ConnectReject", "rej", CM_REJ), 0x0013: ("ConnectReply", "rep", CM_REP),
    0x0014: ("ReadyToUse", "rtu", CM_IDS), 0x0015: ("DisconnectRequest", "dreq", CM_DREQ),
    0x0016: ("DisconnectReply", "drep", CM_IDS),
}
CM_CODECS = {attr: (key, *define(f"cm.{key}", body))
             for attr, (_name, key, body) in CM_MESSAGES.items()}

# Wireshark shows every MAD and CM field in hex (packet-infiniband.c: BASE_HEX), as wide as
# its field type, but for the LIDs, decimal as in the LRH: -T fields and the tree below (the
# handler's ``display``).
DISPLAY: dict[str, str] = {
    **{key: hex_spec(fld.bits) for fld, key in zip(MAD_LAYOUT.fields, MAD_KEYS)},
    **{f"cm.{key}.{fld.name}": hex_spec(fld.bits)
       for key, layout, _dec, _enc in CM_CODECS.values() for fld in layout.fields
       if not fld.name.endswith("lid")},
}
# Wireshark's names for CM fields that are not ``infiniband.`` + ours: it calls a REQ's and a
# REP's Local Communication ID by the message's name, files the DREQ's remote QPN under REQ
# and calls DREP "drsp".
WIRESHARK_NAMES: dict[str, tuple[str, ...]] = {
    "infiniband.cm.req": ("cm.req.localcommid",),
    "infiniband.cm.rep": ("cm.rep.localcommid",),
    "infiniband.cm.rej.msgrej": ("cm.rej.msgrejected",),
    "infiniband.cm.rej.rejinfolen": ("cm.rej.rejectinfolen",),
    "infiniband.cm.req.remoteqpneecn": ("cm.dreq.remoteqpneecn",),
    "infiniband.cm.drsp.localcommid": ("cm.drep.localcommid",),
    "infiniband.cm.drsp.remotecommid": ("cm.drep.remotecommid",),
}

MGMT_SUBN_LID, MGMT_SUBN_DIRECTED, MGMT_SUBN_ADM, MGMT_CM = 0x01, 0x81, 0x03, 0x07
MGMT_CLASSES = {0x01: "Subn", 0x81: "Subn", 0x03: "SubnAdm", 0x04: "Perf", 0x05: "BM",
                0x06: "DevMgt", 0x07: "ComMgt", 0x08: "SNMP"}
METHODS = {0x01: "Get", 0x02: "Set", 0x81: "GetResp", 0x03: "Send", 0x05: "Trap",
           0x06: "Report", 0x86: "ReportResp", 0x07: "TrapRepress", 0x12: "GetTable",
           0x92: "GetTableResp", 0x13: "GetTraceTable", 0x14: "GetMulti",
           0x94: "GetMultiResp", 0x15: "Delete", 0x95: "DeleteResp"}
SMP_ATTRIBUTES = {0x0001: "ClassPortInfo", 0x0002: "Notice", 0x0003: "InformInfo",
                  0x0010: "NodeDescription", 0x0011: "NodeInfo", 0x0012: "SwitchInfo",
                  0x0014: "GUIDInfo", 0x0015: "PortInfo", 0x0016: "P_KeyTable",
                  0x0017: "SLtoVLMappingTable", 0x0018: "VLArbitrationTable",
                  0x0019: "LinearForwardingTable", 0x001A: "RandomForwardingTable",
                  0x001B: "MulticastForwardingTable", 0x0020: "SMInfo",
                  0x0030: "VendorDiag", 0x0031: "LedInfo"}
SA_ATTRIBUTES = {0x0001: "ClassPortInfo", 0x0002: "Notice", 0x0003: "InformInfo",
                 0x0011: "NodeRecord", 0x0012: "PortInfoRecord",
                 0x0013: "SLtoVLMappingTableRecord", 0x0014: "SwitchInfoRecord",
                 0x0015: "LinearForwardingTableRecord", 0x0016: "RandomForwardingTableRecord",
                 0x0017: "MulticastForwardingTableRecord", 0x0018: "SMInfoRecord",
                 0x0020: "LinkRecord", 0x0030: "GuidInfoRecord", 0x0031: "ServiceRecord",
                 0x0033: "P_KeyTableRecord", 0x0035: "PathRecord",
                 0x0036: "VLArbitrationTableRecord", 0x0038: "MCMemberRecord",
                 0x0039: "TraceRecord", 0x003A: "MultiPathRecord",
                 0x003B: "ServiceAssociationRecord"}
ATTRIBUTES = {MGMT_SUBN_LID: SMP_ATTRIBUTES, MGMT_SUBN_DIRECTED: SMP_ATTRIBUTES,
              MGMT_SUBN_ADM: SA_ATTRIBUTES,
              MGMT_CM: {a: m[0] for a, m in CM_MESSAGES.items()}}
# Path MTU codes (IBA 9.6, CM pppmtu): code -> bytes
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}

ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ARP = 0x0800, 0x86DD, 0x0806
IPOIB_TYPES = {ETHERTYPE_IPV4: "IPv4", ETHERTYPE_IPV6: "IPv6", ETHERTYPE_ARP: "ARP"}
_UD = frozenset(c for c, op in OPCODES.items() if op.transport is Transport.UD
                and "deth" in op.headers)


def mad_name(mgmtclass: int, method: int, attribute: int) -> str:
    """``SubnGet(SMInfo)``, ``SubnAdmGetResp(PathRecord)``, ``ComMgtSend(ConnectRequest)``."""
    cls = MGMT_CLASSES.get(mgmtclass, f"Class0x{mgmtclass:02x}")
    meth = METHODS.get(method, f"Method0x{method:02x}")
    attr = ATTRIBUTES.get(mgmtclass, {}).get(attribute, f"0x{attribute:04x}")
    return f"{cls}{meth}({attr})"


def decode_payload(frame: bytes, w: Walk, f: dict[str, Any]) -> list[str]:
    """Decode a MAD (QP0/QP1) or IPoIB header at the start of a UD payload into ``f``;
    returns the layer names added."""
    if f.get("bth.opcode") not in _UD:
        return []
    start, stop = w.payload_off, w.pad_off
    qp = f["bth.destqp"]
    if qp in (0, 1):
        if stop - start < MAD_SIZE:
            return []
        f["mad"] = True
        mad = decode_mad(frame, start)
        f.update(zip(MAD_KEYS, mad.values()))
        layers = ["mad"]
        codec = CM_CODECS.get(mad["attributeid"]) if mad["mgmtclass"] == MGMT_CM else None
        if codec is not None:
            key, layout, dec, _enc = codec
            if stop - start - MAD_SIZE >= layout.size:
                f["cm"] = True
                f[f"cm.{key}"] = True
                f.update((f"cm.{key}.{n}", v) for n, v in dec(frame, start + MAD_SIZE).items())
                layers.append("cm")
        return layers
    if stop - start >= IPOIB_LAYOUT.size:
        etype = int.from_bytes(frame[start:start + 2], "big")
        if etype in IPOIB_TYPES:
            f["ipoib"] = True
            f["ipoib.type"] = etype
            f["ipoib.reserved"] = int.from_bytes(frame[start + 2:start + 4], "big")
            inner = start + IPOIB_LAYOUT.size
            if etype == ETHERTYPE_IPV4 and stop - inner >= 20:
                f["ip.src"] = socket.inet_ntoa(frame[inner + 12:inner + 16])
                f["ip.dst"] = socket.inet_ntoa(frame[inner + 16:inner + 20])
                f["ip.proto"] = frame[inner + 9]
            elif etype == ETHERTYPE_IPV6 and stop - inner >= 40:
                f["ipv6.src"] = socket.inet_ntop(socket.AF_INET6, frame[inner + 8:inner + 24])
                f["ipv6.dst"] = socket.inet_ntop(socket.AF_INET6,
                                                 frame[inner + 24:inner + 40])
                f["ipv6.nxt"] = frame[inner + 6]
            elif etype == ETHERTYPE_ARP and stop - inner >= 8:
                f["arp.opcode"] = int.from_bytes(frame[inner + 6:inner + 8], "big")
            return ["ipoib"]
    return []


def info(f: dict[str, Any]) -> tuple[str, str] | None:
    """(protocol, Info) for a MAD, CM message or IPoIB packet; None for plain transport."""
    if "mad" in f:
        name = mad_name(f["mad.mgmtclass"], f["mad.method"], f["mad.attributeid"])
        if "cm.req" in f:
            mtu = MTU_BYTES.get(f["cm.req.pppmtu"], f["cm.req.pppmtu"])
            name += (f" LocalQPN=0x{f['cm.req.localqpn']:06x} "
                     f"StartPSN={f['cm.req.startpsn']} MTU={mtu}")
        elif "cm.rep" in f:
            name += (f" LocalQPN=0x{f['cm.rep.localqpn']:06x} "
                     f"StartPSN={f['cm.rep.startpsn']}")
        elif "cm.dreq" in f:
            name += f" RemoteQPN=0x{f['cm.dreq.remoteqpneecn']:06x}"
        elif "cm.rej" in f:
            name += f" Reason={f['cm.rej.reason']}"
        return ("InfiniBand CM" if "cm" in f else "InfiniBand MAD"), name
    if "ipoib" in f:
        kind = IPOIB_TYPES[f["ipoib.type"]]
        if "ip.src" in f:
            return "IPoIB", f"IPoIB {kind} {f['ip.src']} -> {f['ip.dst']} proto {f['ip.proto']}"
        if "ipv6.src" in f:
            return "IPoIB", (f"IPoIB {kind} {f['ipv6.src']} -> {f['ipv6.dst']} "
                             f"next {f['ipv6.nxt']}")
        return "IPoIB", f"IPoIB {kind}"
    return None


def field_names() -> list[str]:
    """Every flat field name this module may set (for ``-G fields`` and ``-Y`` checks)."""
    names = ["mad", "cm", "ipoib", "ipoib.type", "ipoib.reserved", "arp.opcode",
             *MAD_KEYS]
    for key, layout, _dec, _enc in CM_CODECS.values():
        names.append(f"cm.{key}")
        names += [f"cm.{key}.{fld.name}" for fld in layout.fields]
    return names


def build_mad(mgmtclass: int, method: int, attribute: int, tid: int = 1,
              body: bytes = b"", size: int = 256) -> bytes:
    """A MAD of ``size`` bytes (256 for UD MADs): common header, ``body``, zero fill."""
    head = encode_mad({"baseversion": 1, "mgmtclass": mgmtclass, "classversion":
                       2 if mgmtclass == MGMT_CM else 1, "method": method,
                       "transactionid": tid, "attributeid": attribute})
    data = head + body
    return data + bytes(max(size - len(data), 0))


def build_cm(attribute: int, values: dict[str, Any], tid: int = 1) -> bytes:
    """A CM MAD (class 0x07, method Send) with message body ``values`` (field names as in
    ``CM_CODECS``; missing fields are 0)."""
    _key, _layout, _dec, enc = CM_CODECS[attribute]
    return build_mad(MGMT_CM, 0x03, attribute, tid, enc(values))


def _shown(key: str, f: dict[str, Any]) -> str:
    spec = DISPLAY.get(key)
    return str(f[key]) if spec is None else spec.format(f[key])


def tree(f: dict[str, Any]) -> list[str]:
    """``-V`` lines for a MAD (and its CM message) or an IPoIB header."""
    out: list[str] = []
    if "mad" in f:
        name = mad_name(f["mad.mgmtclass"], f["mad.method"], f["mad.attributeid"])
        out.append(f"    MAD Header - Common Management Datagram: {name}")
        out += [f"        {fld.title}: {DISPLAY[key].format(f[key])}"
                for fld, key in zip(MAD_LAYOUT.fields, MAD_KEYS)]
        for _key, layout, _dec, _enc in CM_CODECS.values():
            prefix = layout.name + "."
            if layout.name in f:
                out.append(f"    CM {CM_MESSAGES[f['mad.attributeid']][0]}")
                out += [f"        {fld.title}: {_shown(prefix + fld.name, f)}"
                        for fld in layout.fields if not fld.name.startswith("reserved")]
    if "ipoib" in f:
        out.append(f"    IP over InfiniBand: Type {IPOIB_TYPES[f['ipoib.type']]} "
                   f"(0x{f['ipoib.type']:04x})")
    return out
