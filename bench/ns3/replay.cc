// Packet-level replay of per-link transfer groups in ns-3 (bench/simulate.py builds and runs this driver).
//
// stdin:  L G HEADER MTU SERIAL
//         L lines: alpha_s bandwidth_Bps                     (one point-to-point link per arc, nodes of its own)
//         G lines: link bytes ndeps dep...                   (groups sorted by step; deps are group indices)
// stdout: the time the last group's last packet is received (seconds)
//
// A link's groups leave in order; a group is queued on its link's device when every group it depends on has
// been received completely and the link's previous groups are queued (SERIAL 0: the link sends back to back, as
// a FIFO, so a group's latency overlaps the next one's transmission) or received (SERIAL 1: the link is busy for
// alpha + bytes / b per group, as the dependency-driven time charges it). A group is cut into packets of MTU payload bytes, each carrying HEADER bytes more (RoCE-like: Ethernet,
// IP, UDP, BTH, ICRC), plus the point-to-point device's own 2-byte header. The channel delay is the link's alpha,
// its data rate the link's bandwidth. No internet stack: packets go straight to the device (NetDevice::Send),
// so nothing here depends on its install order, and nothing is sent from the PhyTxEnd trace.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

using namespace ns3;

struct Group {
  int link;
  double bytes;
  std::vector<int> dependents;
  int waiting = 0;
  uint32_t packets = 0;
  bool queued = false;
};

static std::vector<Group> groups;
static std::vector<std::vector<int>> perLink;      // group ids of each link, in order
static std::vector<size_t> nextToQueue;            // per link: index in perLink of the next group to queue
static std::vector<std::vector<int>> inFlight;     // per link: queued groups not fully received, in order
static std::vector<size_t> inFlightHead;
static std::vector<uint32_t> received;             // per link: packets of the head in-flight group received
static std::vector<Ptr<NetDevice>> senders;
static uint32_t header = 58, mtu = 4096;
static int serial = 1;
static double lastArrival = 0.0;
static size_t arrived = 0;

static void TryQueue(int link) {
  while (nextToQueue[link] < perLink[link].size()) {
    int g = perLink[link][nextToQueue[link]];
    if (groups[g].waiting > 0) return;
    if (serial && inFlightHead[link] < inFlight[link].size()) return;
    nextToQueue[link]++;
    Group &gr = groups[g];
    uint64_t total = (uint64_t)std::llround(gr.bytes);
    uint32_t n = (uint32_t)((total + mtu - 1) / mtu);
    if (n == 0) n = 1;
    gr.packets = n;
    gr.queued = true;
    inFlight[link].push_back(g);
    for (uint32_t k = 0; k < n; ++k) {
      uint64_t payload = (k + 1 < n) ? mtu : total - (uint64_t)mtu * (n - 1);
      Ptr<Packet> p = Create<Packet>((uint32_t)payload + header);
      senders[link]->Send(p, senders[link]->GetChannel()->GetDevice(1)->GetAddress(), 0x0800);
    }
  }
}

static bool Receive(int link, Ptr<NetDevice>, Ptr<const Packet>, uint16_t, const Address &) {
  int g = inFlight[link][inFlightHead[link]];
  if (++received[link] < groups[g].packets) return true;
  received[link] = 0;
  inFlightHead[link]++;
  arrived++;
  lastArrival = Simulator::Now().GetSeconds();
  for (int d : groups[g].dependents) {
    if (--groups[d].waiting == 0) Simulator::ScheduleNow(&TryQueue, groups[d].link);
  }
  if (serial) Simulator::ScheduleNow(&TryQueue, link);
  return true;
}

int main(int argc, char **argv) {
  int L, G;
  if (!(std::cin >> L >> G >> header >> mtu >> serial)) return 2;
  std::vector<double> alpha(L), bw(L);
  for (int l = 0; l < L; ++l) std::cin >> alpha[l] >> bw[l];
  groups.resize(G);
  perLink.assign(L, {});
  for (int g = 0; g < G; ++g) {
    int nd;
    std::cin >> groups[g].link >> groups[g].bytes >> nd;
    for (int k = 0; k < nd; ++k) {
      int d;
      std::cin >> d;
      groups[d].dependents.push_back(g);
      groups[g].waiting++;
    }
    perLink[groups[g].link].push_back(g);
  }
  nextToQueue.assign(L, 0);
  inFlight.assign(L, {});
  inFlightHead.assign(L, 0);
  received.assign(L, 0);
  senders.resize(L);
  for (int l = 0; l < L; ++l) {
    NodeContainer nodes;
    nodes.Create(2);
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate((uint64_t)std::llround(bw[l] * 8.0))));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu + header));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(alpha[l])));
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("100000000p")));
    NetDeviceContainer dev = p2p.Install(nodes);
    senders[l] = dev.Get(0);
    dev.Get(1)->SetReceiveCallback(MakeBoundCallback(&Receive, l));
  }
  for (int l = 0; l < L; ++l) Simulator::ScheduleNow(&TryQueue, l);
  Simulator::Run();
  Simulator::Destroy();
  if (arrived != (size_t)G) {
    std::fprintf(stderr, "%zu of %d groups arrived\n", arrived, G);
    return 1;
  }
  std::printf("%.17g\n", lastArrival);
  return 0;
}
