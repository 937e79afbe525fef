// SPDX-License-Identifier: GPL-2.0
// rlm fast path: what the programs share.
//
//  - The records shared with user space: the maps' keys and values, the ring buffer's record,
//    the counters' slots and the constants user space writes. kmod-fastpath/src/records.rs
//    mirrors each one as a #[repr(C)] Rust struct, and its layout test compiles static asserts
//    against this file (sizes, every field's offset, the constants' values) with the clang and
//    target that build the programs: change one side alone and that test fails.
//  - The servers' ports map, which user space fills (kmod-fastpath's `load_object`).
//  - The packet parsing (Ethernet, IPv4 or IPv6, TCP), written once here.
#ifndef RLM_COMMON_H
#define RLM_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// ---- The inline fast path (inline.bpf.c, kmod-fastpath's `InlinePath`) ----

#define MODE_QUEUE_ALL 0    // every client SYN to a server port goes to NFQUEUE
#define MODE_VERDICTS 1     // SYNs with a verdict of the current generation are decided here
#define MODE_PASS_ALL 2     // no rule acts at the SYN: pass and report every SYN

#define ACTION_PASS 0
#define ACTION_DROP 1
#define ACTION_LIMIT 2

// struct event's kind, and its flags.
#define KIND_OBSERVED 0
#define KIND_SYN_PASSED 1
#define KIND_SYN_DROPPED 2
#define KIND_SYN_HELD 3     // a client's SYN the kernel dropped for the engine to decide and send on
#define FLAG_LIMITED 1
#define FLAG_FROM_SERVER 2  // KIND_OBSERVED: the frame came in at the server port (else it leaves there)
#define FLAG_VLAN 4         // KIND_SYN_HELD: the frame had a VLAN tag outside its data (rule: proto << 16 | tci)

// struct config's flags.
#define CFG_QUEUE_RESPONSES 1
#define CFG_QUEUE_REQUESTS 2
#define CFG_HOLD_SYNS 4     // a SYN without a verdict is held (KIND_SYN_HELD), not marked for NFQUEUE
// How long a held SYN may wait for rlm before the next ones pass undecided (rlm behind or gone):
// a fifth of TCP's first SYN timeout (1 s), past which passing it undecided serves the client better.
#define HOLD_WAIT_NS 200000000ULL
// How long held SYNs wait before the next one wakes the reader again.
#define HOLD_REWAKE_NS 1000000ULL

#define MAX_BUCKETS 1024

// Slots of the `counters` per-CPU array.
enum inline_counter {
    C_SYN_PASSED,
    C_SYN_DROPPED,
    C_SYN_QUEUED,
    C_OBSERVED,
    C_RING_FULL,
    C_ACK_SKIPPED,
    C_RESP_QUEUED,
    C_REQ_QUEUED,
    C_STALE,        // packets passed untouched and unreported: the engine's heartbeat was stale
    C_REJ_QUEUED,   // a rejected connection's client segments without payload, marked for NFQUEUE
    C_REJ_DROPPED,  // a rejected connection's server segments, dropped
    C_SYN_HELD,     // SYNs without a verdict handed to the engine whole and dropped (CFG_HOLD_SYNS)
    C_HOLD_FAILED,  // SYNs that could not be held (the ring full) and passed undecided
    C_HOLD_LATE,    // SYNs passed undecided: a held SYN has waited for rlm longer than HOLD_WAIT_NS
    C_BODY_CUT,     // server segments of a body the engine does not read, reported cut to their headers
    C_BODY_ARMED,   // response heads read in the kernel whose body is cut from their first segment on
    C_BODY_SILENT,  // of the cut segments, those not reported at all (all but one a MiB and the last)
    C_TINY_FRAG,    // RFC 1858's tiny TCP fragments from the clients, dropped (struct parsed's tiny_frag)
    C_INLINE_COUNTERS,
};

// An IPv4 connection (addresses and ports in network byte order): `handshakes`' and
// `rejected`'s key.
struct conn_key {
    __u32 client;
    __u32 server;
    __u16 client_port;
    __u16 server_port;
};

// `unread`'s value (inline.bpf.c): the sequence number after the part of a body now cut, and
// the body's bytes beyond it (a body of 2 GiB or more is cut RANGE_STEP bytes at a time).
struct body_range {
    __u32 until;
    __u32 pad;
    __u64 beyond;
};
#define RANGE_STEP (1U << 30)

// `config`'s one value.
struct config {
    __u32 queue_mark;
    __u32 flags;    // CFG_*
    __u32 shards;   // engines the reports are dealt to by client (1..MAX_SHARDS; 0 is 1)
    __u32 pad;
};

// `modes`' value, one a shard: how its clients' SYNs are treated, and the generation its
// engine's verdicts must carry to apply.
struct shard_mode {
    __u64 generation;
    __u32 mode;     // MODE_*
    __u32 pad;
};

// At most this many engines: `events0` to `events7` and the slots of `generations` and `held`.
#define MAX_SHARDS 8

// `syn_verdicts`' key.
struct syn_key {
    __u32 client;   // network byte order
    __u32 server;   // network byte order
    __u16 port;     // the server's port, network byte order
    __u16 pad;
};

// `syn_verdicts`' value.
struct syn_verdict {
    __u64 generation;
    __u32 rule;
    __u16 action;   // ACTION_*
    __u16 pad;
    __u32 bucket;   // ACTION_LIMIT: the slot in `buckets`
    __u32 pad2;
};

// A LIMIT SYN token bucket (`buckets`): tokens in billionths, rate in thousandths of a token
// per second.
struct bucket {
    struct bpf_spin_lock lock;
    __u32 burst;
    __u64 rate_milli;
    __u64 tokens_nano;
    __u64 last_ns;   // 0: full, start counting at the next SYN
};

// A ring buffer record (`events`): this header, then `len` bytes of the frame.
struct event {
    __u64 ts_ns;     // bpf_ktime_get_ns (CLOCK_MONOTONIC)
    __u32 len;       // bytes of the frame that follow
    __u32 wire_len;  // the frame's length
    __u16 kind;      // KIND_*
    __u16 flags;     // FLAG_*
    __u32 rule;      // KIND_SYN_DROPPED: the rule; KIND_SYN_HELD with FLAG_VLAN: the tag
    __u8 data[];
};

// ---- The SRPT egress classifier (classify.bpf.c, kmod-fastpath's `SrptEgress`) ----

#define MAX_CUTOFFS 6
#define MAX_CLASSES 16

#define MODE_OFF 0     // leave skb->priority alone (count only)
#define MODE_FAIR 1    // every packet: base
#define MODE_SRPT 2    // base + band

// Slots of the `srpt_counters` per-CPU array.
enum srpt_counter {
    C_KNOWN,     // data packets ranked by remaining bytes
    C_ATTAINED,  // data packets ranked by bytes sent (no end known)
    C_RETX,      // data packets wholly sent before
    C_ADOPTED,   // publications taken into a flow (a response's start and end)
    C_ROLLED,    // flows rolled over to their next response at an end
    C_MIDFLOW,   // flows first seen after their handshake
    C_HELD,      // new segments kept in their flow's band rather than overtake its queued ones
    C_SRPT_STALE,  // packets put in band 0: the engine's heartbeat was stale
    C_SRPT_COUNTERS,
};

// `srpt_config`'s one value.
struct srpt_cfg {
    __u32 mode;        // MODE_OFF, MODE_FAIR, MODE_SRPT
    __u32 base;        // band 0's classid; band b is base + b
    __u32 cutoffs;     // n, at most MAX_CUTOFFS
    __u32 other_band;  // TCP not from a server port, and IPv6
    __u32 cut[MAX_CUTOFFS];
    __u32 resend_band; // resends of the lowest data band's bytes (0: they stay in it)
    __u32 pad;
};

// A flow as it leaves toward the client: the server's address and port first, network order
// (the key of `resp_size` and `flow_state`).
struct flow_key {
    __u32 saddr;
    __u32 daddr;
    __u16 sport;
    __u16 dport;
};

// `resp_size`'s value: the current response, as the engine learnt it from the head: sequence
// numbers of its first byte (the status line) and of the byte after its end.
struct resp {
    __u32 start;
    __u32 end;
    __u32 has_end;
    __u32 pad;
};

// `flow_state`'s value.
struct flow {
    __u32 start;       // the current response's first byte
    __u32 end;         // the byte after its end, if has_end
    __u32 has_end;
    __u32 hi;          // the byte after the highest sent
    __u32 una;         // the client's highest cumulative ACK (srpt_acks)
    __u32 band;        // the data band of the last new segment (0: none yet)
    __u64 bytes;       // skb->len of every packet of the flow, retransmissions included
    __u64 packets;
    __u64 retx_bytes;  // payload bytes sent again (seq + len <= hi)
    __u64 last_ns;     // bpf_ktime_get_ns of the last packet
};

// `class_stats`' value: packets and bytes sent per band (slot = band, modulo MAX_CLASSES).
struct class_count {
    __u64 packets;
    __u64 bytes;
};

// ---- The servers' ports ----

// Indexed by port (host byte order): 1 for the servers' ports. An array, so that the JIT inlines
// the lookup done for every packet. Every object that includes this file has its own.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u8);
} server_ports SEC(".maps");

static __always_inline int is_server_port(__u16 net_port)
{
    __u32 port = bpf_ntohs(net_port);
    __u8 *v = bpf_map_lookup_elem(&server_ports, &port);
    return v && *v;
}

// ---- The engine's heartbeat ----

// `heartbeat`'s one value. rlm's loop writes last_ns (CLOCK_MONOTONIC, as bpf_ktime_get_ns)
// every few tens of milliseconds. While the engine is watched (stale_ns > 0) and its last beat
// is older than stale_ns, or there was none yet, the programs fail open: SYNs and segments pass
// with no mark and no report, and the classifier puts every packet in band 0 (control: first,
// in arrival order, like FAIR). An rlm that hangs, stops (SIGSTOP) or falls behind by more than
// stale_ns thus stops dropping, queueing and ranking within stale_ns, even where its programs
// stay attached (clsact filters, a process that is alive but stuck). stale_ns == 0: not watched
// (tests that drive the programs without a loop).
struct heartbeat {
    __u64 last_ns;
    __u64 stale_ns;
};

// Every object that includes this file has its own; rlm beats each one it loaded.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct heartbeat);
} heartbeat SEC(".maps");

// 1 if the engine is watched and its heartbeat is stale (or it never beat).
static __always_inline int engine_stale(void)
{
    __u32 zero = 0;
    struct heartbeat *h = bpf_map_lookup_elem(&heartbeat, &zero);
    if (!h || h->stale_ns == 0)
        return 0;
    __u64 last = h->last_ns;
    if (last == 0)
        return 1;
    __u64 now = bpf_ktime_get_ns();
    return now > last && now - last > h->stale_ns;
}

// ---- Packet parsing ----

// What parse_frame found in an Ethernet frame.
enum frame_kind {
    FRAME_SHORT,      // shorter than an Ethernet header
    FRAME_OTHER,      // neither IPv4 nor IPv6 (ARP, ...), or an IPv4 header cut short or bad
    FRAME_IPV6,       // IPv6; `tcp` (`udp`) is set if its next header is TCP (UDP), no extension headers
    FRAME_IPV4,       // IPv4, not TCP (`udp` is set for UDP, but in a later fragment)
    FRAME_IPV4_FRAG,  // IPv4 TCP or UDP, a later fragment (no TCP or UDP header)
    FRAME_TCP_SHORT,  // IPv4 TCP whose TCP header is cut short
    FRAME_TCP4,       // IPv4 TCP: `tcp`, the addresses and the payload's length
};

struct parsed {
    struct tcphdr *tcp;  // FRAME_TCP4, or FRAME_IPV6 with TCP; else 0
    struct udphdr *udp;  // FRAME_IPV4 or FRAME_IPV6 with UDP (QUIC's, counted by the engine); else 0
    __u32 saddr;         // IPv4 only (network byte order); 0 otherwise
    __u32 daddr;
    __u32 payload;       // TCP payload bytes (IPv4, and IPv6 without extension headers)
    __u32 tcp_off;       // where `tcp` starts in the frame
    __u32 kind;          // enum frame_kind
    int v4;              // kind == FRAME_TCP4
    int tiny_frag;       // an IPv4 TCP fragment of RFC 1858's tiny kind: a first fragment too short
                         // for the TCP header, or a later one at offset 8 bytes (it would
                         // overwrite the first's flags); its SYN would be made only at reassembly
    __u64 skey;          // the source's shard key (source_key), when `tcp` or `udp` is set
    __u64 dkey;          // the destination's
};

// A client's key for its shard (rlm-core's `policy::source_of`): its IPv4 address with bit 32
// set, or its IPv6 address' first 64 bits (one host commonly has a whole /64).
static __always_inline __u64 source_key4(__u32 net_addr)
{
    return (1ULL << 32) | bpf_ntohl(net_addr);
}

static __always_inline __u64 source_key6(struct in6_addr *a)
{
    return ((__u64)bpf_ntohl(a->in6_u.u6_addr32[0]) << 32) | bpf_ntohl(a->in6_u.u6_addr32[1]);
}

// The shard of a client's key among `shards` (rlm-core's `Sharding::shard_of_client`, which
// kmod-fastpath's tests hold this to): Fibonacci hashing, the product's high bits scaled to
// the count.
static __always_inline __u32 shard_of_key(__u64 key, __u32 shards)
{
    __u64 h = key * 0x9E3779B97F4A7C15ULL;
    return (__u32)(((h >> 32) * shards) >> 32);
}

// Parse `skb`'s frame into `p` (zeroed by the caller); returns `p->kind`. Every pointer set is
// bounds-checked against the packet's end, as the verifier wants.
static __always_inline __u32 parse_frame(struct __sk_buff *skb, struct parsed *p)
{
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return p->kind = FRAME_SHORT;
    if (eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > data_end || ip->ihl < 5)
            return p->kind = FRAME_OTHER;
        // The fragment's offset (in 8-byte units) and whether more fragments follow.
        __u16 frag = bpf_ntohs(ip->frag_off);
        __u16 offset = frag & 0x1fff;
        if (ip->protocol == IPPROTO_UDP && !offset) {
            struct udphdr *udp = (void *)ip + ip->ihl * 4;
            if ((void *)(udp + 1) <= data_end) {
                barrier_var(udp);
                p->udp = udp;
                p->saddr = ip->saddr;
                p->daddr = ip->daddr;
                p->skey = source_key4(ip->saddr);
                p->dkey = source_key4(ip->daddr);
            }
        }
        // A later fragment of a UDP datagram has no UDP header: the same kind as TCP's, so that
        // SRPT ranks it with its first fragment (unranked data), not ahead of it as control.
        if (ip->protocol == IPPROTO_UDP && offset)
            return p->kind = FRAME_IPV4_FRAG;
        if (ip->protocol != IPPROTO_TCP)
            return p->kind = FRAME_IPV4;
        // Later fragments carry no TCP header.
        if (offset) {
            p->tiny_frag = offset == 1;
            return p->kind = FRAME_IPV4_FRAG;
        }
        // A first fragment (more fragments to come) whose datagram part cannot hold the TCP
        // header, by its length on the wire (not by what the skb holds linear).
        if ((frag & 0x2000) && bpf_ntohs(ip->tot_len) < ip->ihl * 4 + sizeof(struct tcphdr)) {
            p->tiny_frag = 1;
            return p->kind = FRAME_TCP_SHORT;
        }
        struct tcphdr *tcp = (void *)ip + ip->ihl * 4;
        if ((void *)(tcp + 1) > data_end)
            return p->kind = FRAME_TCP_SHORT;
        // One pointer, the one checked: clang must not compute it again from ip->ihl later,
        // which would give the verifier a pointer with no known bounds.
        barrier_var(tcp);
        p->tcp = tcp;
        p->tcp_off = sizeof(struct ethhdr) + ip->ihl * 4;
        p->saddr = ip->saddr;
        p->daddr = ip->daddr;
        p->skey = source_key4(ip->saddr);
        p->dkey = source_key4(ip->daddr);
        __u32 headers = ip->ihl * 4 + tcp->doff * 4;
        __u32 total = bpf_ntohs(ip->tot_len);
        // BIG TCP's GRO super-frames past 64 KiB carry a total length of 0: the skb's length
        // is the datagram's then (behind the Ethernet header, which tc's skb->len counts).
        if (total == 0 && skb->len > sizeof(struct ethhdr))
            total = skb->len - sizeof(struct ethhdr);
        p->payload = total > headers ? total - headers : 0;
        p->v4 = 1;
        return p->kind = FRAME_TCP4;
    }
    if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        if ((void *)(ip6 + 1) <= data_end) {
            p->skey = source_key6(&ip6->saddr);
            p->dkey = source_key6(&ip6->daddr);
        }
        if ((void *)(ip6 + 1) <= data_end && ip6->nexthdr == IPPROTO_TCP) {
            struct tcphdr *tcp = (void *)(ip6 + 1);
            if ((void *)(tcp + 1) <= data_end) {
                p->tcp = tcp;
                p->tcp_off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
                // So that a head in a GRO super-frame is copied whole as over IPv4 (snap_of);
                // every other use of it is IPv4's only (`v4`).
                __u32 headers = tcp->doff * 4;
                __u32 total = bpf_ntohs(ip6->payload_len);
                p->payload = total > headers ? total - headers : 0;
            }
        } else if ((void *)(ip6 + 1) <= data_end && ip6->nexthdr == IPPROTO_UDP) {
            struct udphdr *udp = (void *)(ip6 + 1);
            if ((void *)(udp + 1) <= data_end)
                p->udp = udp;
        }
        return p->kind = FRAME_IPV6;
    }
    return p->kind = FRAME_OTHER;
}

#endif
