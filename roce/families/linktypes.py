"""pcap link types the families own (tcpdump.org LINKTYPE_*): a module of its own so that
the registry's rows can name them without importing the families that decode them."""

LINKTYPE_ERF = 197  # Endace ERF records (roce.families.erf)
LINKTYPE_INFINIBAND = 247  # native InfiniBand packets, LRH first (roce.families.ib)
