// SPDX-License-Identifier: GPL-2.0
// rlm fast path: the SRPT egress classifier (002 section 2, 000 section 3), on the bridge's
// client port egress: every packet a server sends toward the clients gets a priority band by
// its response's REMAINING bytes, in skb->priority as an HTB classid (strict priority = HTB
// leaves with `prio`, since this kernel has no prio qdisc).
//
//  - band 0: SYN/ACKs and every packet without TCP payload (ACK, FIN, RST), and non-TCP (ARP,
//    ICMP) but UDP: control first, as 002 puts SYN/ACKs alone in the highest band;
//  - bands 1 .. n+1: data, at n cutoffs (002: 1K, 2K, 5K, 20K, 50K): band 1 + #{cut[i] < x};
//  - band n+2 (resend_band, optional): resends of bytes of the lowest data band. A bump in the
//    wire holds a server's segments in its queue; when the lowest band starves past the
//    server's RTO, the server resends its whole window, and those copies of segments still
//    queued here would take the starved band's capacity from the originals (measured: a fifth
//    of the link). In a band of their own below it they go out only when it is empty, and a
//    resend that is needed (the original was lost) still goes then.
//
// IPv6, later IPv4 fragments, TCP from a port that is not a server's and UDP (QUIC, unranked:
// rlm reads no size in it) go in other_band, the lowest data band.
//
// x is the response's remaining bytes when the engine has published its end (resp_size: the
// response's start and end in the connection's sequence space, from the HTTP head's length),
// else the bytes of it sent so far (chunked or close-delimited bodies, the first flight before
// the head is parsed, anything not HTTP): a flow then sinks as it grows, as in LAS.
//
// Remaining bytes are counted in sequence space, so a retransmission (seq + len <= the highest
// byte sent) keeps the flow's current band and moves nothing, and a response that reaches its
// end rolls the flow over to the next response on the connection (keep-alive, pipelining): the
// engine's next publication, whose start is not behind the flow's, is adopted.
//
// resp_size is written by the engine only; flow_state by this program only (the engine reads
// it: per-flow bytes, packets, retransmitted bytes and last-packet time, item 3 of issue 11).
// In FAIR mode (the baseline) every packet gets the one class, after the same accounting, so
// both modes pay the same per-packet cost.
//
// The records shared with user space (srpt_cfg, flow_key, resp, flow, class_count, the
// counters' slots), the servers' ports map and the packet parsing are in common.h.
#include "common.h"

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct srpt_cfg);
} srpt_config SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 131072);
    __type(key, struct flow_key);
    __type(value, struct resp);
} resp_size SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 131072);
    __type(key, struct flow_key);
    __type(value, struct flow);
} flow_state SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, MAX_CLASSES);
    __type(key, __u32);
    __type(value, struct class_count);
} class_stats SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, C_SRPT_COUNTERS);
    __type(key, __u32);
    __type(value, __u64);
} srpt_counters SEC(".maps");

static __always_inline void count(__u32 c)
{
    __u64 *v = bpf_map_lookup_elem(&srpt_counters, &c);
    if (v)
        *v += 1;
}

// Sequence-space comparisons, safe across the wrap at 2^32.
static __always_inline int seq_ge(__u32 a, __u32 b)
{
    return (__s32)(a - b) >= 0;
}

static __always_inline int seq_gt(__u32 a, __u32 b)
{
    return (__s32)(a - b) > 0;
}

static __always_inline int classify_to(struct __sk_buff *skb, struct srpt_cfg *cfg, __u32 band)
{
    if (cfg->mode != MODE_OFF)
        skb->priority = cfg->mode == MODE_FAIR ? cfg->base : cfg->base + band;
    __u32 slot = (cfg->mode == MODE_FAIR ? 0 : band) % MAX_CLASSES;
    struct class_count *s = bpf_map_lookup_elem(&class_stats, &slot);
    if (s) {
        s->packets += 1;
        s->bytes += skb->len;
    }
    return TC_ACT_OK;
}

// The data band of x bytes: 1 + the number of cutoffs below x.
static __always_inline __u32 band_of(struct srpt_cfg *cfg, __u32 x)
{
    __u32 band = 1;
#pragma unroll
    for (int i = 0; i < MAX_CUTOFFS; i++) {
        if (i < cfg->cutoffs && x > cfg->cut[i])
            band++;
    }
    return band;
}

SEC("classifier")
int classify(struct __sk_buff *skb)
{
    __u32 zero = 0;
    struct srpt_cfg *cfg = bpf_map_lookup_elem(&srpt_config, &zero);
    if (!cfg)
        return TC_ACT_OK;
    if (engine_stale()) {
        count(C_SRPT_STALE);
        return classify_to(skb, cfg, 0);
    }
    struct parsed p = {};
    switch (parse_frame(skb, &p)) {
    case FRAME_SHORT:
        return TC_ACT_OK;
    case FRAME_IPV6:
    case FRAME_IPV4_FRAG:
        return classify_to(skb, cfg, cfg->other_band);
    case FRAME_IPV4:
        // UDP (QUIC's bulk, whose sizes rlm does not read): unranked data, in the other band
        // with IPv6's, not ahead of every TCP response in the control band.
        if (p.udp)
            return classify_to(skb, cfg, cfg->other_band);
        return classify_to(skb, cfg, 0);
    case FRAME_TCP4:
        break;
    default:
        // Not IP, IPv4 other than TCP, or a header cut short.
        return classify_to(skb, cfg, 0);
    }
    struct tcphdr *tcp = p.tcp;
    __u16 sport = tcp->source, dport = tcp->dest;
    __u32 seq = bpf_ntohl(tcp->seq);
    int syn = tcp->syn, rst = tcp->rst;
    __u32 len = p.payload;
    struct flow_key key = { .saddr = p.saddr, .daddr = p.daddr, .sport = sport, .dport = dport };

    if (!is_server_port(sport))
        return classify_to(skb, cfg, cfg->other_band);
    __u64 now = bpf_ktime_get_ns();
    if (syn) {
        // A SYN/ACK opens the flow (a resend, or a new connection on the same ports, starts it
        // again): its first response starts at the next byte.
        struct flow f = { .start = seq + 1, .hi = seq + 1, .una = seq + 1, .bytes = skb->len, .packets = 1, .last_ns = now };
        bpf_map_update_elem(&flow_state, &key, &f, BPF_ANY);
        return classify_to(skb, cfg, 0);
    }
    struct flow *f = bpf_map_lookup_elem(&flow_state, &key);
    if (!f) {
        // First seen after its handshake (rlm started mid-flow, or the entry was evicted): its
        // current response is taken to start here.
        struct flow nf = { .start = seq, .hi = seq, .una = seq };
        bpf_map_update_elem(&flow_state, &key, &nf, BPF_NOEXIST);
        f = bpf_map_lookup_elem(&flow_state, &key);
        if (!f)
            return classify_to(skb, cfg, 0);
        count(C_MIDFLOW);
    }
    f->bytes += skb->len;
    f->packets += 1;
    f->last_ns = now;
    if (len == 0 || rst)
        return classify_to(skb, cfg, 0);

    // The engine's publication, if it is for a response not behind the flow's current one and
    // says something new (a later start, or the end of the current one). One left behind (its
    // response over, the flow rolled past it) is ignored.
    struct resp *r = bpf_map_lookup_elem(&resp_size, &key);
    if (r) {
        __u32 rs = r->start, re = r->end, rh = r->has_end;
        if (seq_gt(rs, f->start) || (rs == f->start && rh && !f->has_end)) {
            f->start = rs;
            f->end = re;
            f->has_end = rh;
            count(C_ADOPTED);
        }
    }
    __u32 hi = f->hi;
    __u32 base = seq_gt(hi, seq) ? hi : seq;
    if (f->has_end && seq_ge(base, f->end)) {
        // Past this response's end: the next response (its size not known yet) starts there.
        f->start = f->end;
        f->has_end = 0;
        count(C_ROLLED);
    }
    __u32 x;
    if (f->has_end) {
        x = f->end - base;
        count(C_KNOWN);
    } else {
        x = base - f->start;
        count(C_ATTAINED);
    }
    __u32 band = band_of(cfg, x);
    if (seq_ge(hi, seq + len)) {
        // A resend: in the flow's current band.
        f->retx_bytes += len;
        count(C_RETX);
        if (f->band)
            band = f->band;
        if (cfg->resend_band && band == cfg->cutoffs + 1)
            band = cfg->resend_band;
        return classify_to(skb, cfg, band);
    }
    // No overtaking: while the client has not acknowledged everything sent, earlier segments
    // of the flow may still wait in its band here, and a segment put in a higher band would
    // reach the client before them (the client's SACKs would then make the server resend
    // them). The flow moves up once they are through.
    __u32 cur = f->band;
    if (cur && band < cur && seq_gt(hi, f->una)) {
        band = cur;
        count(C_HELD);
    }
    f->band = band;
    f->hi = seq + len;
    return classify_to(skb, cfg, band);
}

// On the client port's ingress, ahead of the other programs there: the clients' cumulative
// ACKs, so that `classify` knows what of each flow has left rlm's queue. Never decides: it
// returns TC_ACT_UNSPEC (tcx's TCX_NEXT), so the next program there (syn_admit) runs.
SEC("classifier")
int srpt_acks(struct __sk_buff *skb)
{
    struct parsed p = {};
    if (parse_frame(skb, &p) != FRAME_TCP4)
        return TC_ACT_UNSPEC;
    struct tcphdr *tcp = p.tcp;
    if (!tcp->ack || tcp->syn)
        return TC_ACT_UNSPEC;
    struct flow_key key = { .saddr = p.daddr, .daddr = p.saddr, .sport = tcp->dest, .dport = tcp->source };
    __u32 ack = bpf_ntohl(tcp->ack_seq);
    struct flow *f = bpf_map_lookup_elem(&flow_state, &key);
    if (f && seq_gt(ack, f->una) && seq_ge(f->hi, ack))
        f->una = ack;
    return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
