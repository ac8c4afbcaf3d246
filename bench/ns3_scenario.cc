// The ns-3 side of bench/bench_ns3.py: the same network roce emulates, built from a
// description on standard input, with UDP traffic at line rate and no congestion control.
//
// Input (one item per line):
//   nodes N               nodes 0 .. N-1 (hosts and switches alike are IP routers)
//   link A B              a point-to-point link between nodes A and B
//   flow S D PACKETS      host S sends PACKETS datagrams to host D
// Arguments: RATE_GBPS DELAY_NS PAYLOAD_BYTES SPRAY(0|1)
//   PAYLOAD_BYTES is the UDP payload; on the wire a frame is PAYLOAD + 28 (IPv4, UDP)
//   + 2 (PPP) bytes.  SPRAY=1 picks one of the equal-cost next hops per packet at random
//   (Ipv4GlobalRouting's RandomEcmpRouting), as roce's --lb spray does.
//
// Output: one JSON line: packet-hops (frames received at the far end of a link), the CPU
// seconds of Simulator::Run() alone, the virtual time of the last frame received, and the
// datagrams the sinks received.
//
// Queues are large enough that nothing is dropped (roce's runs it is compared with are
// lossless), and no queue disc sits in front of the devices: the least work ns-3 can do
// per packet-hop on this network.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

uint64_t g_hops = 0;
uint64_t g_sunk = 0;
int64_t g_lastRxNs = 0;

void
OnHop(Ptr<const Packet>)
{
    ++g_hops;
    g_lastRxNs = Simulator::Now().GetNanoSeconds();
}

void
OnSink(Ptr<const Packet>, const Address&)
{
    ++g_sunk;
}

double
CpuSeconds()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Flow
{
    uint32_t src, dst;
    uint64_t packets;
};

} // namespace

int
main(int argc, char* argv[])
{
    if (argc != 5)
    {
        std::cerr << "usage: " << argv[0] << " RATE_GBPS DELAY_NS PAYLOAD SPRAY < network\n";
        return 1;
    }
    const std::string rate = std::string(argv[1]) + "Gbps";
    const std::string delay = std::string(argv[2]) + "ns";
    const uint32_t payload = std::stoul(argv[3]);
    const bool spray = std::string(argv[4]) == "1";

    uint32_t n = 0;
    std::vector<std::pair<uint32_t, uint32_t>> links;
    std::vector<Flow> flows;
    std::string word;
    while (std::cin >> word)
    {
        if (word == "nodes")
        {
            std::cin >> n;
        }
        else if (word == "link")
        {
            uint32_t a, b;
            std::cin >> a >> b;
            links.emplace_back(a, b);
        }
        else if (word == "flow")
        {
            Flow f;
            std::cin >> f.src >> f.dst >> f.packets;
            flows.push_back(f);
        }
        else
        {
            std::cerr << "unknown line: " << word << "\n";
            return 1;
        }
    }

    Config::SetDefault("ns3::Ipv4GlobalRouting::RandomEcmpRouting", BooleanValue(spray));
    NodeContainer nodes;
    nodes.Create(n);
    InternetStackHelper internet;
    internet.Install(nodes);

    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", StringValue(rate));
    p2p.SetChannelAttribute("Delay", StringValue(delay));
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1000000p"));

    Ipv4AddressHelper addresses("10.0.0.0", "255.255.255.252");
    TrafficControlHelper tc;
    std::map<uint32_t, Ipv4Address> addressOf; // a node's first interface address
    for (auto [a, b] : links)
    {
        NetDeviceContainer devs = p2p.Install(nodes.Get(a), nodes.Get(b));
        Ipv4InterfaceContainer ifs = addresses.Assign(devs);
        tc.Uninstall(devs);
        addresses.NewNetwork();
        addressOf.emplace(a, ifs.GetAddress(0));
        addressOf.emplace(b, ifs.GetAddress(1));
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    const uint16_t port = 9;
    std::map<uint32_t, bool> sinking;
    for (const Flow& f : flows)
    {
        if (!sinking[f.dst])
        {
            PacketSinkHelper sink("ns3::UdpSocketFactory",
                                  InetSocketAddress(Ipv4Address::GetAny(), port));
            ApplicationContainer app = sink.Install(nodes.Get(f.dst));
            app.Get(0)->TraceConnectWithoutContext("Rx", MakeCallback(&OnSink));
            sinking[f.dst] = true;
        }
        OnOffHelper source("ns3::UdpSocketFactory",
                           InetSocketAddress(addressOf.at(f.dst), port));
        source.SetConstantRate(DataRate(rate), payload);
        source.SetAttribute("MaxBytes", UintegerValue(f.packets * payload));
        source.Install(nodes.Get(f.src));
    }
    Config::ConnectWithoutContext(
        "/NodeList/*/DeviceList/*/$ns3::PointToPointNetDevice/PhyRxEnd",
        MakeCallback(&OnHop));

    Simulator::Stop(Seconds(1));
    const double t0 = CpuSeconds();
    Simulator::Run();
    const double loop = CpuSeconds() - t0;
    Simulator::Destroy();
    std::printf("{\"hops\": %llu, \"loop_cpu_s\": %.6f, \"last_rx_ns\": %lld, "
                "\"received\": %llu}\n",
                (unsigned long long)g_hops,
                loop,
                (long long)g_lastRxNs,
                (unsigned long long)g_sunk);
    return 0;
}
