"""pcap link types the families own (tcpdump.org LINKTYPE_*): a module of its own so that
the registry's rows can name them without importing the families that decode them."""

from roce.locate import LINKTYPE_INFINIBAND  # native InfiniBand packets (roce.families.ib)

LINKTYPE_ERF = 197  # Endace ERF records (roce.families.erf)

__all__ = ["LINKTYPE_ERF", "LINKTYPE_INFINIBAND"]
