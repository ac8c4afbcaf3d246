"""RoCE on real wires: Scapy layers derived from the opcode table, craft/send/replay/sniff."""
