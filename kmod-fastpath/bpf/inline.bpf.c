// SPDX-License-Identifier: GPL-2.0
// rlm fast path for `rlm run`: SYN admission in the kernel and the packets the engine measures.
//
// Two tc programs, attached by rlm-core's driver through kmod-fastpath's `InlinePath`:
//
//  - syn_admit, on the bridge's client port (ingress): a client's SYN to a server port is
//    decided here when the engine has published a verdict for its (client, server, port) under
//    the current generation of the class statistics: passed, dropped (DROP SYN), or policed by a
//    token bucket (LIMIT SYN). Each decided SYN is reported through the ring buffer, so the
//    engine's pageview accounting still sees it. A SYN without a valid verdict is held
//    (CFG_HOLD_SYNS, rlm's default): reported whole, waking the engine at once, and dropped
//    here; the engine decides it, sends it on out of the server port itself if it passes, and
//    publishes the verdict for the next ones. Without CFG_HOLD_SYNS it gets rlm's queue mark
//    instead, which the netfilter rule rlm then installs sends to NFQUEUE.
//  - observe, on the server port (ingress and egress): every TCP packet to or from a server
//    port is copied into the ring buffer for the engine to measure, but the clients' SYNs
//    (reported at the client port) and bare IPv4 ACKs other than the one that completes a
//    handshake (the engine times the handshake with it) and a client's that carries a D-SACK
//    (it tells the engine a server's retransmission was spurious); the others tell it nothing
//    it needs.
//    Nothing is held. While content adaptation is on (CFG_QUEUE_RESPONSES), the servers' IPv4
//    segments with payload, FIN or RST get the queue mark instead of a report: the engine sees
//    them through NFQUEUE, and rewrites them there. Likewise, while a rewrite is carried out
//    (CFG_QUEUE_REQUESTS), the clients' IPv4 segments with payload get the mark at the client
//    port (syn_admit) and are not reported here; so do all the client's segments of a connection
//    the engine rejected (REJECT: it answered the request and reset the server), whose server
//    segments are dropped here. A server's IPv4 segment that lies wholly before the end of a
//    body the engine does not read (the `unread` map: from the engine's BodyUnread, or from the
//    head read here) is not reported, but for one a MiB and the one that ends the body, cut to
//    their headers with their length on the wire: bulk bytes do not cross to user space,
//    whatever the frame's size (GRO/GSO). UDP datagrams to or from a server port
//    (QUIC's) are reported too, their first UDP_SNAP bytes: the engine counts their flows and
//    bytes per class, it does not manage them.
//
// Reports go to a ring per engine shard (events0 to events7; config.shards of them in use): every
// report of a client to its shard's, the client hashed as rlm-core's Sharding::shard_of_client
// hashes it (common.h shard_of_key), so that each engine sees all of its clients' packets and
// none of the others'. Each shard has its own SYN mode and generation (`modes`) and held-SYN
// wait (`held`); with one shard everything goes to events0.
//
// Maps are the only interface with the engine. If rlm is gone the programs are detached: tcx
// links belong to its process; clsact filters outlive it, and rlm's guard process (or its next
// start) detaches them. Then the bridge forwards plainly. While rlm lives but its heartbeat is
// stale (common.h), both programs pass every packet untouched and unreported.
//
// The records shared with user space (config, syn_key, syn_verdict, bucket, event, the
// counters' slots), the servers' ports map and the packet parsing are in common.h.
#include "common.h"

// Frames are reported whole up to SNAP_MAX bytes, cut there; a frame that may hold an HTTP
// head (the clients' data, a server segment starting with "HTTP/") up to HEAD_SNAP bytes, so
// that a head, and a container's first bytes, are seen whole in a GRO/GSO super-frame. The
// engine counts what is cut by its length on the wire (the record's wire_len).
#define SNAP_MAX 2048
#define HEAD_SNAP 16384
#define RING_BYTES (16 << 20)
// A UDP datagram's report: up to a QUIC long header's version behind Ethernet, IPv6 and UDP.
#define UDP_SNAP 128

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct config);
} config SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct syn_key);
    __type(value, struct syn_verdict);
} syn_verdicts SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, MAX_BUCKETS);
    __type(key, __u32);
    __type(value, struct bucket);
} buckets SEC(".maps");

// IPv4 connections between SYN/ACK and the ACK that completes the handshake: the ACK number
// that ACK will carry.
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct conn_key);
    __type(value, __u32);
} handshakes SEC(".maps");

// IPv4 connections whose request the engine answered itself (REJECT) and whose server it reset:
// until when (CLOCK_MONOTONIC ns) they are the engine's. While CFG_QUEUE_REQUESTS is on, all
// the client's segments of one go through the queue (the engine acknowledges the client's FIN
// and drops the rest; passed on, they would draw the server's RST), the server's are dropped,
// and a new SYN on its ports ends the entry.
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, struct conn_key);
    __type(value, __u64);
} rejected SEC(".maps");

// A D-SACK search over a segment's options (has_dsack), one option a step of bpf_loop.
struct sack_scan {
    __u8 opts[64];  // the options (40 bytes at most), zero past them; read masked to 63
    __u32 len;      // their length
    __u32 i;        // the next option's offset
    __u32 ack;      // the acknowledgement number (host order)
    int found;
};

static __always_inline __u32 opt32(struct sack_scan *s, __u32 at)
{
    return ((__u32)s->opts[at & 63] << 24) | ((__u32)s->opts[(at + 1) & 63] << 16) | ((__u32)s->opts[(at + 2) & 63] << 8) |
           s->opts[(at + 3) & 63];
}

// One option: 0 to go on to the next, 1 to stop.
static long sack_step(__u64 index, void *ctx)
{
    struct sack_scan *s = ctx;
    __u32 i = s->i;
    if (i >= s->len)
        return 1;
    __u8 kind = s->opts[i & 63];
    if (kind == 0)
        return 1;
    if (kind == 1) {
        s->i = i + 1;
        return 0;
    }
    __u8 olen = s->opts[(i + 1) & 63];
    if (olen < 2 || i + olen > s->len)
        return 1;
    if (kind == 5 && olen >= 10) {
        __u32 l1 = opt32(s, i + 2), r1 = opt32(s, i + 6);
        if ((__s32)(l1 - s->ack) < 0) {
            s->found = 1;
        } else if (olen >= 18) {
            __u32 l2 = opt32(s, i + 10), r2 = opt32(s, i + 14);
            s->found = (__s32)(l1 - l2) >= 0 && (__s32)(r2 - r1) >= 0;
        }
        return 1;
    }
    s->i = i + olen;
    return 0;
}

// Whether a segment's options hold a D-SACK (RFC 2883 4, as rlm-core's wire::dsack reads it):
// a SACK option whose first block starts below the acknowledgement number, or lies within its
// second block.
static __always_inline int has_dsack(struct __sk_buff *skb, struct tcphdr *tcp, __u32 tcp_off)
{
    // A SACK option takes 10 bytes at least, 12 with the NOPs that align it: none in a header
    // of fewer than 8 words (most ACKs carry only timestamps, 12 bytes, or nothing).
    __u32 words = tcp->doff;
    if (words < 8)
        return 0;
    // Timestamps alone (NOP, NOP, TS), the usual 8-word header: read no further.
    __u8 *o = (void *)(tcp + 1);
    if (words == 8 && (void *)(o + 4) <= (void *)(long)skb->data_end && o[0] == 1 && o[1] == 1 && o[2] == 8 && o[3] == 10)
        return 0;
    __u32 len = (words - 5) * 4;
    struct sack_scan s = {};
    if (bpf_skb_load_bytes(skb, tcp_off + sizeof(struct tcphdr), s.opts, len) < 0)
        return 0;
    s.len = len;
    s.ack = bpf_ntohl(tcp->ack_seq);
    bpf_loop(40, sack_step, &s, 0);
    return s.found;
}

// Whether `k` is a rejected connection still in the engine's hands.
static __always_inline int is_rejected(struct conn_key *k)
{
    __u64 *until = bpf_map_lookup_elem(&rejected, k);
    return until && *until > bpf_ktime_get_ns();
}

// IPv4 connections whose server is sending a body the engine does not read: the sequence
// number after its end (rlm's BodyUnread). The server's segments that end by then are reported
// cut to their headers; the entry goes once one reaches or passes it.
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct conn_key);
    __type(value, struct body_range);
} unread SEC(".maps");

// How far each shard's reader is with the held SYNs (CLOCK_MONOTONIC ns), three slots a shard
// (shard * HELD_SLOTS + slot): HELD_LAST, when syn_admit last held one; HELD_FIRST, when it
// held the first of those now waiting (one held while none waited); HELD_TAKEN, written by rlm:
// the record stamp of the last held SYN it took. SYNs wait while HELD_LAST > HELD_TAKEN; the
// oldest of them was held no earlier than the later of HELD_FIRST and HELD_TAKEN.
#define HELD_LAST 0
#define HELD_FIRST 1
#define HELD_TAKEN 2
#define HELD_SLOTS 3
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, HELD_SLOTS * MAX_SHARDS);
    __type(key, __u32);
    __type(value, __u64);
} held SEC(".maps");

static __always_inline __u64 *held_slot(__u32 shard, __u32 slot)
{
    __u32 i = shard * HELD_SLOTS + slot;
    return bpf_map_lookup_elem(&held, &i);
}

// Each shard's engine's SYN mode and generation of the class statistics (its engine alone writes
// them): a client's SYN is treated as its shard's mode says, and a verdict applies to it while
// it carries its shard's generation.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, MAX_SHARDS);
    __type(key, __u32);
    __type(value, struct shard_mode);
} modes SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, C_INLINE_COUNTERS);
    __type(key, __u32);
    __type(value, __u64);
} counters SEC(".maps");

// One ring of reports per shard: every report of a client goes to its shard's (shard_of), whose
// engine alone reads it. The rings of shards not in use are made one page at load (kmod-fastpath).
#define RING(n)                                                                                   \
    struct {                                                                                      \
        __uint(type, BPF_MAP_TYPE_RINGBUF);                                                       \
        __uint(max_entries, RING_BYTES);                                                          \
    } events##n SEC(".maps")
RING(0);
RING(1);
RING(2);
RING(3);
RING(4);
RING(5);
RING(6);
RING(7);

// A shard's ring (an if-chain: the verifier follows each map on its own path).
static __always_inline void *ring_of(__u32 shard)
{
    if (shard == 0)
        return &events0;
    if (shard == 1)
        return &events1;
    if (shard == 2)
        return &events2;
    if (shard == 3)
        return &events3;
    if (shard == 4)
        return &events4;
    if (shard == 5)
        return &events5;
    if (shard == 6)
        return &events6;
    if (shard == 7)
        return &events7;
    return &events0;
}

// The shard of the client whose key is `key`, as `cfg` deals them.
static __always_inline __u32 shard_in(struct config *cfg, __u64 key)
{
    if (!cfg || cfg->shards <= 1)
        return 0;
    __u32 n = cfg->shards > MAX_SHARDS ? MAX_SHARDS : cfg->shards;
    return shard_of_key(key, n);
}

// The same, `config` looked up.
static __always_inline __u32 shard_of(__u64 key)
{
    __u32 zero = 0;
    return shard_in(bpf_map_lookup_elem(&config, &zero), key);
}

static __always_inline void count(__u32 c)
{
    __u64 *v = bpf_map_lookup_elem(&counters, &c);
    if (v)
        *v += 1;
}

// A server's response head read here, so that its body is cut from its first segment on,
// without waiting for the engine: the head's first HEAD_PARSE bytes are copied into a per-CPU
// buffer, with HEAD_SLACK bytes past them for the fixed-length peeks at a line's start.
#define HEAD_PARSE 1024
#define HEAD_SLACK 64
struct head_buf {
    char b[HEAD_PARSE + HEAD_SLACK];
};
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct head_buf);
} head_bufs SEC(".maps");

#define HEAD_END 1     // the blank line that ends the head was found (at `end`)
#define HEAD_LENGTH 2  // a Content-Length (`length`)
#define HEAD_READ 4    // the engine reads this body: a Transfer-Encoding, or a type it scans or counts lines of
struct head_scan {
    char *b;
    __u32 n;
    __u32 end;
    __u64 length;
    __u32 flags;
};

// Whether `p` starts with the lower-case `lit` (`len` bytes), ASCII letters of `p` folded.
static __always_inline int starts_lower(const char *p, const char *lit, int len)
{
#pragma unroll
    for (int k = 0; k < 20; k++) {
        if (k >= len)
            break;
        char c = p[k];
        if (c >= 'A' && c <= 'Z')
            c |= 0x20;
        if (c != lit[k])
            return 0;
    }
    return 1;
}

// One byte of the head (a bpf_loop callback): at each line's start, the headers that decide.
static long head_byte(__u32 i, void *ctx)
{
    struct head_scan *h = ctx;
    if (i >= h->n || i >= HEAD_PARSE)
        return 1;
    const char *b = h->b;
    // Masked where the verifier sees it (the compiler would drop a mask it knows is idle).
    __u64 at = i;
    asm volatile("" : "+r"(at));
    at &= HEAD_PARSE - 1;
    if (b[at] != '\n')
        return 0;
    const char *s = b + at + 1;
    if (s[0] == '\r' && s[1] == '\n') {
        h->end = at + 3;
        h->flags |= HEAD_END;
        return 1;
    }
    if (starts_lower(s, "content-length:", 15)) {
        __u64 v = 0;
        int digits = 0, done = 0;
#pragma unroll
        for (int k = 15; k < 34; k++) {
            char c = s[k];
            if (done || (digits == 0 && (c == ' ' || c == '\t')))
                continue;
            if (c >= '0' && c <= '9' && digits < 12) {
                v = v * 10 + (c - '0');
                digits++;
            } else {
                done = 1;
            }
        }
        if (digits == 0 || (h->flags & HEAD_LENGTH))
            h->flags |= HEAD_READ;    // unreadable, or given twice: the engine's to judge
        h->length = v;
        h->flags |= HEAD_LENGTH;
    } else if (starts_lower(s, "transfer-encoding:", 18)) {
        h->flags |= HEAD_READ;
    } else if (starts_lower(s, "content-type:", 13)) {
        int o = 13;
#pragma unroll
        for (int k = 13; k < 17; k++)
            if (o == k && (s[k] == ' ' || s[k] == '\t'))
                o = k + 1;
        const char *t = s + o;
        if (starts_lower(t, "text/html", 9) || starts_lower(t, "text/css", 8) || starts_lower(t, "application/xhtml", 17) ||
            starts_lower(t, "multipart/", 10))
            h->flags |= HEAD_READ;
    }
    return 0;
}

// Whether the payload at `at` (`payload` bytes) starts with a response's status line ("HTTP/").
static __always_inline int starts_response(struct __sk_buff *skb, __u32 at, __u32 payload)
{
    char start[5];
    if (payload < sizeof(start) || bpf_skb_load_bytes(skb, at, start, sizeof(start)) < 0)
        return 0;
    return start[0] == 'H' && start[1] == 'T' && start[2] == 'T' && start[3] == 'P' && start[4] == '/';
}

// A short server segment that is a response head alone, as a server that writes its head
// apart from its body (nginx with sendfile) sends it: pushed, starting with "HTTP/" and ending
// with the blank line. Only pushed segments short enough to be one are looked at (a bulk
// segment is seldom pushed), at the cost of two small loads.
static __always_inline int is_head_alone(struct __sk_buff *skb, struct tcphdr *tcp, __u32 hdrs, __u32 payload)
{
    if (!tcp->psh || payload < 16 || payload > HEAD_PARSE || !starts_response(skb, hdrs, payload))
        return 0;
    char end[4];
    if (bpf_skb_load_bytes(skb, hdrs + payload - 4, end, sizeof(end)) < 0)
        return 0;
    return end[0] == '\r' && end[1] == '\n' && end[2] == '\r' && end[3] == '\n';
}

// A server segment that starts with a response head (`hdrs`: where its payload starts): when
// the head is whole in it, says 200 or 206, gives a Content-Length and nothing that makes the
// engine read the body (a Transfer-Encoding; HTML, XHTML, CSS or a multipart type), the body
// is cut from here on (the `unread` entry, as the engine's BodyUnread would make it) and the
// snap length that reports the head alone is returned; else 0, and the engine decides.
static __always_inline __u32 arm_body_cut(struct __sk_buff *skb, struct tcphdr *tcp, __u32 hdrs, __u32 payload, struct conn_key *k)
{
    __u32 zero = 0;
    struct head_buf *hb = bpf_map_lookup_elem(&head_bufs, &zero);
    if (!hb)
        return 0;
    __u64 n = payload < HEAD_PARSE ? payload : HEAD_PARSE;
    asm volatile("" : "+r"(n));
    if (n < 16 || n > HEAD_PARSE)
        return 0;
    if (bpf_skb_load_bytes(skb, hdrs, hb->b, n) < 0)
        return 0;
    const char *b = hb->b;
    if (b[5] != '1' || b[6] != '.' || b[8] != ' ' || b[9] != '2' || b[10] != '0' || (b[11] != '0' && b[11] != '6') || b[12] != ' ')
        return 0;
    struct head_scan h = { .b = hb->b, .n = n };
    bpf_loop(HEAD_PARSE, head_byte, &h, 0);
    if ((h.flags & (HEAD_END | HEAD_LENGTH | HEAD_READ)) != (HEAD_END | HEAD_LENGTH) || h.length == 0)
        return 0;
    // A body that ends in this segment leaves nothing to cut, and what follows it here (the
    // next response's head, pipelined or merged by GRO) must be seen.
    if (h.end + h.length <= payload)
        return 0;
    // A body of 2 GiB or more is cut a RANGE_STEP at a time (sequence numbers wrap at 4 GiB).
    __u64 first = h.length < (1ULL << 31) ? h.length : RANGE_STEP;
    struct body_range r = { .until = bpf_ntohl(tcp->seq) + h.end + (__u32)first, .beyond = h.length - first };
    if (bpf_map_update_elem(&unread, k, &r, BPF_ANY) < 0)
        return 0;
    count(C_BODY_ARMED);
    return hdrs + h.end;
}

static __always_inline void fill(struct event *e, struct __sk_buff *skb, __u32 len, __u16 kind, __u16 flags, __u32 rule)
{
    e->ts_ns = bpf_ktime_get_ns();
    e->len = len;
    e->wire_len = skb->len;
    e->kind = kind;
    e->flags = flags;
    e->rule = rule;
}

// The reader drains the ring every few milliseconds; it is woken early only when a quarter of
// the ring is waiting, and then once more for each further sixteenth that fills: a forced
// wakeup costs about 3 us, thirty times a report (measured by benches/syn_drop.rs when every
// report past the quarter woke it), so a flood that outruns the reader must not pay one per
// SYN. A held SYN wakes it when syn_admit says so (`wake`): it waits for the engine. The
// quarter and the sixteenths are the ring's own (`[ebpf] ring_mb`, 1 to 1024 MiB; they were
// the compiled-in 16 MiB's, so a ring of 4 MiB or less was never woken by what waited in it);
// its size is asked only past a quarter of the smallest ring (MIN_RING_BYTES).
#define MIN_RING_BYTES (1 << 20)
static __always_inline void submit(void *ring, void *e, __u64 size, int wake)
{
    __u64 avail = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);
    __u64 flags = BPF_RB_NO_WAKEUP;
    if (wake) {
        flags = BPF_RB_FORCE_WAKEUP;
    } else if (avail >= MIN_RING_BYTES / 4) {
        __u64 bytes = bpf_ringbuf_query(ring, BPF_RB_RING_SIZE);
        __u64 step = bytes / 16;
        if (step && avail >= bytes / 4 && (avail < size || (avail - size) / step != avail / step))
            flags = BPF_RB_FORCE_WAKEUP;
    }
    bpf_ringbuf_submit(e, flags);
}

// One size class of ring records: reserve `size` bytes of frame, copy `len` (<= size) into it;
// returns from report() with 1 if the record was submitted.
#define REPORT_IN(size)                                                                           \
    do {                                                                                          \
        struct event *e = bpf_ringbuf_reserve(ring, sizeof(struct event) + (size), 0);           \
        if (!e) {                                                                                 \
            count(C_RING_FULL);                                                                   \
            return 0;                                                                             \
        }                                                                                         \
        /* Bound the length again where the verifier sees it (the compiler may merge the tests \
           that chose this size class). */                                                      \
        __u64 n = len;                                                                            \
        asm volatile("" : "+r"(n));                                                               \
        if (n > (size))                                                                           \
            n = (size);                                                                           \
        fill(e, skb, n, kind, flags, rule);                                                       \
        if (n == 0 || bpf_skb_load_bytes(skb, 0, e->data, n) < 0) {                               \
            bpf_ringbuf_discard(e, 0);                                                            \
            return 0;                                                                             \
        }                                                                                         \
        submit(ring, e, BPF_RINGBUF_HDR_SZ + sizeof(struct event) + (size), wake);                \
        return 1;                                                                                 \
    } while (0)

// Copy the frame (cut at `snap`: SNAP_MAX or HEAD_SNAP) into the ring buffer of `shard` for its
// engine, in the smallest record that holds it, so that the ring (and the reader's cache)
// carries little more than the frames; `wake`: wake the reader at once. 1 if it was reported.
static __always_inline int report_waking(struct __sk_buff *skb, __u32 shard, __u16 kind, __u16 flags, __u32 rule, __u32 snap, int wake)
{
    void *ring = ring_of(shard);
    __u32 len = skb->len;
    if (len == 0)
        return 0;
    if (len > snap)
        len = snap;
    if (len <= 128)
        REPORT_IN(128);
    if (len <= 256)
        REPORT_IN(256);
    if (len <= 512)
        REPORT_IN(512);
    if (len <= 1024)
        REPORT_IN(1024);
    if (len <= SNAP_MAX)
        REPORT_IN(SNAP_MAX);
    if (len <= 4096)
        REPORT_IN(4096);
    if (len <= 8192)
        REPORT_IN(8192);
    REPORT_IN(HEAD_SNAP);
}

// A report the reader takes at its next drain.
static __always_inline int report(struct __sk_buff *skb, __u32 shard, __u16 kind, __u16 flags, __u32 rule, __u32 snap)
{
    return report_waking(skb, shard, kind, flags, rule, snap, 0);
}

// How much of an observed frame to copy: HEAD_SNAP when it may hold an HTTP head (the clients'
// data; a server segment whose payload starts with "HTTP/"), else SNAP_MAX. Only frames longer
// than SNAP_MAX are looked at.
static __always_inline __u32 snap_of(struct __sk_buff *skb, struct tcphdr *tcp, int to_server, __u32 payload)
{
    if (skb->len <= SNAP_MAX || payload == 0)
        return SNAP_MAX;
    if (to_server)
        return HEAD_SNAP;
    __u32 at = (__u32)((void *)tcp - (void *)(long)skb->data) + tcp->doff * 4;
    return starts_response(skb, at, payload) ? HEAD_SNAP : SNAP_MAX;
}

// Take a token from a LIMIT SYN bucket; 1 if there was one.
static __always_inline int take_token(__u32 slot)
{
    struct bucket *b = bpf_map_lookup_elem(&buckets, &slot);
    if (!b)
        return 1;
    __u64 now = bpf_ktime_get_ns();
    int ok = 0;
    bpf_spin_lock(&b->lock);
    __u64 full = (__u64)(b->burst ? b->burst : 1) * 1000000000ULL;
    if (b->last_ns == 0) {
        b->tokens_nano = full;
    } else if (now > b->last_ns) {
        __u64 dt = now - b->last_ns;
        if (dt > 10000000000ULL)
            dt = 10000000000ULL;
        __u64 add = dt * b->rate_milli / 1000;
        b->tokens_nano = b->tokens_nano + add > full ? full : b->tokens_nano + add;
    }
    b->last_ns = now;
    if (b->tokens_nano >= 1000000000ULL) {
        b->tokens_nano -= 1000000000ULL;
        ok = 1;
    }
    bpf_spin_unlock(&b->lock);
    return ok;
}

SEC("classifier")
int syn_admit(struct __sk_buff *skb)
{
    struct parsed p = {};
    parse_frame(skb, &p);
    if (p.tiny_frag) {
        // No host sends these (RFC 1858); a client that does could have the server reassemble
        // a SYN no decision saw (tc runs before any reassembly). Dropped while rlm is live.
        if (engine_stale()) {
            count(C_STALE);
            return TC_ACT_OK;
        }
        count(C_TINY_FRAG);
        return TC_ACT_SHOT;
    }
    if (!p.tcp)    // TCP over IPv4, or over IPv6 without extension headers, only
        return TC_ACT_OK;
    struct tcphdr *tcp = p.tcp;
    // Read once, while the verifier still knows the header is in the packet (clang may
    // otherwise recompute the pointer past a branch and lose its bounds).
    __u16 dest = tcp->dest, source = tcp->source;
    int syn = tcp->syn, ack = tcp->ack, rst = tcp->rst;
    if (!syn && p.v4) {
        // A client's segment with payload (a request): queued while a rewrite or a REJECT is
        // carried out; so is any segment of a connection the engine rejected.
        __u32 zero = 0;
        struct config *cfg = bpf_map_lookup_elem(&config, &zero);
        if (!cfg || !(cfg->flags & CFG_QUEUE_REQUESTS) || !is_server_port(dest))
            return TC_ACT_OK;
        if (engine_stale()) {
            count(C_STALE);
            return TC_ACT_OK;
        }
        if (p.payload > 0) {
            count(C_REQ_QUEUED);
            skb->mark |= cfg->queue_mark;
        } else {
            struct conn_key k = { .client = p.saddr, .server = p.daddr, .client_port = source, .server_port = dest };
            if (is_rejected(&k)) {
                count(C_REJ_QUEUED);
                skb->mark |= cfg->queue_mark;
            }
        }
        return TC_ACT_OK;
    }
    if (!syn || ack || rst || !is_server_port(dest))
        return TC_ACT_OK;
    if (engine_stale()) {
        count(C_STALE);
        return TC_ACT_OK;
    }
    __u32 zero = 0;
    struct config *cfg = bpf_map_lookup_elem(&config, &zero);
    if (!cfg)
        return TC_ACT_OK;
    if (p.v4 && (cfg->flags & CFG_QUEUE_REQUESTS)) {
        // A new connection on a rejected one's ports: that one is over.
        struct conn_key k = { .client = p.saddr, .server = p.daddr, .client_port = source, .server_port = dest };
        bpf_map_delete_elem(&rejected, &k);
    }
    __u32 shard = shard_in(cfg, p.skey);
    struct shard_mode *m = bpf_map_lookup_elem(&modes, &shard);
    if (!m)
        return TC_ACT_OK;
    if (m->mode == MODE_PASS_ALL) {
        count(C_SYN_PASSED);
        report(skb, shard, KIND_SYN_PASSED, 0, 0, SNAP_MAX);
        return TC_ACT_OK;
    }
    if (m->mode == MODE_VERDICTS && p.v4) {
        struct syn_key key = { .client = p.saddr, .server = p.daddr, .port = dest };
        struct syn_verdict *v = bpf_map_lookup_elem(&syn_verdicts, &key);
        if (v && v->generation == m->generation) {
            __u32 rule = v->rule;
            if (v->action == ACTION_PASS || (v->action == ACTION_LIMIT && take_token(v->bucket))) {
                count(C_SYN_PASSED);
                report(skb, shard, KIND_SYN_PASSED, 0, 0, SNAP_MAX);
                return TC_ACT_OK;
            }
            count(C_SYN_DROPPED);
            report(skb, shard, KIND_SYN_DROPPED, v->action == ACTION_LIMIT ? FLAG_LIMITED : 0, rule, SNAP_MAX);
            return TC_ACT_SHOT;
        }
    }
    if (cfg->flags & CFG_HOLD_SYNS) {
        // Handed to the engine whole and dropped here: the engine sends it on (or not) from
        // its decision. A tag the frame carried outside its data goes with it. If a held SYN
        // has waited for rlm longer than HOLD_WAIT_NS (rlm behind, stopped or gone while the
        // program stays), if the ring has no room, or if the SYN is longer than a record holds
        // whole, it passes undecided (fail-open) and unreported.
        __u64 *last = held_slot(shard, HELD_LAST), *first = held_slot(shard, HELD_FIRST), *taken = held_slot(shard, HELD_TAKEN);
        __u64 now = bpf_ktime_get_ns();
        // Wake the reader for the first held SYN that waits, and again while they have waited
        // more than HOLD_REWAKE_NS (the reader may have gone to sleep just before the last one
        // came): not for each of a flood's, which it takes in the same drain. A forced wakeup
        // costs about 3 us; the bench (benches/syn_drop.rs) times a held SYN at both.
        int waiting = 0, wake = 1;
        if (last && first && taken) {
            __u64 l = *last, f = *first, t = *taken;
            waiting = l > t;
            __u64 oldest = f > t ? f : t;
            __u64 waited = now > oldest ? now - oldest : 0;
            if (waiting && waited > HOLD_WAIT_NS) {
                count(C_HOLD_LATE);
                return TC_ACT_OK;
            }
            wake = !waiting || waited > HOLD_REWAKE_NS;
        }
        __u16 flags = skb->vlan_present ? FLAG_VLAN : 0;
        __u32 tag = skb->vlan_present ? ((__u32)bpf_ntohs((__u16)skb->vlan_proto) << 16) | (skb->vlan_tci & 0xffff) : 0;
        if (skb->len <= SNAP_MAX && report_waking(skb, shard, KIND_SYN_HELD, flags, tag, SNAP_MAX, wake)) {
            // The record's stamp, which rlm writes back, is later than `now`.
            if (last && first) {
                if (!waiting)
                    *first = now;
                *last = now;
            }
            count(C_SYN_HELD);
            return TC_ACT_SHOT;
        }
        count(C_HOLD_FAILED);
        return TC_ACT_OK;
    }
    count(C_SYN_QUEUED);
    skb->mark |= cfg->queue_mark;
    return TC_ACT_OK;
}

SEC("classifier")
int observe(struct __sk_buff *skb)
{
    struct parsed p = {};
    parse_frame(skb, &p);
    if (p.udp) {
        // QUIC's datagrams on a server port: reported for the engine to count.
        struct udphdr *udp = p.udp;
        if (!is_server_port(udp->dest) && !is_server_port(udp->source))
            return TC_ACT_OK;
        if (engine_stale()) {
            count(C_STALE);
            return TC_ACT_OK;
        }
        count(C_OBSERVED);
        // The client is the end that is not a server's port.
        __u32 shard = shard_of(is_server_port(udp->dest) ? p.skey : p.dkey);
        report(skb, shard, KIND_OBSERVED, skb->ingress_ifindex == skb->ifindex ? FLAG_FROM_SERVER : 0, 0, UDP_SNAP);
        return TC_ACT_OK;
    }
    if (!p.tcp)    // TCP over IPv4, or over IPv6 without extension headers, only
        return TC_ACT_OK;
    struct tcphdr *tcp = p.tcp;
    int to_server = is_server_port(tcp->dest);
    if (!to_server && !is_server_port(tcp->source))
        return TC_ACT_OK;
    // A client's SYN is reported (or queued) at the client port.
    if (to_server && tcp->syn && !tcp->ack)
        return TC_ACT_OK;
    if (engine_stale()) {
        count(C_STALE);
        return TC_ACT_OK;
    }
    // Where the frame came from: in at this (the server) port, or out of it toward a server.
    // The engine ignores a server's segment that came from the clients' side (a spoofer's).
    __u16 side = skb->ingress_ifindex == skb->ifindex ? FLAG_FROM_SERVER : 0;
    __u32 zero = 0;
    struct config *cfg = bpf_map_lookup_elem(&config, &zero);
    if (p.v4 && !tcp->syn && p.payload > 0 && to_server) {
        // A client's request, queued at the client port while a rewrite is carried out: the
        // engine has it from the queue.
        if (cfg && (cfg->flags & CFG_QUEUE_REQUESTS))
            return TC_ACT_OK;
    }
    if (!to_server && p.v4) {
        if (cfg && (cfg->flags & CFG_QUEUE_REQUESTS) && side == FLAG_FROM_SERVER) {
            // A server's segment of a connection the engine rejected: the server was reset, the
            // client has the engine's answer; nothing of the server's may follow it.
            struct conn_key k = { .client = p.daddr, .server = p.saddr, .client_port = tcp->dest, .server_port = tcp->source };
            if (is_rejected(&k)) {
                count(C_REJ_DROPPED);
                return TC_ACT_SHOT;
            }
        }
        if (cfg && (cfg->flags & CFG_QUEUE_RESPONSES) && !tcp->syn && (p.payload > 0 || tcp->fin || tcp->rst)) {
            count(C_RESP_QUEUED);
            skb->mark |= cfg->queue_mark;
            return TC_ACT_OK;
        }
    }
    if (p.v4) {
        if (!to_server && tcp->syn && tcp->ack) {
            // The SYN/ACK: remember the ACK number that will complete the handshake.
            struct conn_key k = { .client = p.daddr, .server = p.saddr, .client_port = tcp->dest, .server_port = tcp->source };
            __u32 want = bpf_ntohl(tcp->seq) + 1;
            bpf_map_update_elem(&handshakes, &k, &want, BPF_ANY);
            // A new connection on these ports: a range an earlier one left ends.
            bpf_map_delete_elem(&unread, &k);
        } else if (p.payload == 0 && tcp->ack && !tcp->syn && !tcp->fin && !tcp->rst) {
            // A bare ACK: only the client's handshake ACK goes on, and a client's D-SACK (server
            // bytes it got twice: the engine takes back the end a spurious retransmission gave
            // the response).
            struct conn_key k = { .client = p.saddr, .server = p.daddr, .client_port = tcp->source, .server_port = tcp->dest };
            __u32 *want = to_server ? bpf_map_lookup_elem(&handshakes, &k) : 0;
            if (want && *want == bpf_ntohl(tcp->ack_seq)) {
                bpf_map_delete_elem(&handshakes, &k);
            } else if (!(to_server && has_dsack(skb, tcp, p.tcp_off))) {
                count(C_ACK_SKIPPED);
                return TC_ACT_OK;
            }
        } else if (to_server && !tcp->syn && (p.payload > 0 || tcp->fin || tcp->rst)) {
            // The client's data, FIN or RST: its handshake is over (its ACK lost and carried
            // by the data, or the connection ended), so its entry goes rather than waiting for
            // the LRU (a soak counted them growing by one every few seconds over a lossy WAN).
            struct conn_key k = { .client = p.saddr, .server = p.daddr, .client_port = tcp->source, .server_port = tcp->dest };
            bpf_map_delete_elem(&handshakes, &k);
        }
    }
    __u32 snap = snap_of(skb, tcp, to_server, p.payload);
    if (p.v4 && side == FLAG_FROM_SERVER && p.payload > 0 && !tcp->syn) {
        // A body the engine does not read: only the headers of the segments before its end.
        // A response's head is never cut: a segment longer than a plain report that starts
        // with one (snap_of said HEAD_SNAP) is read here, and its body cut from its first byte.
        struct conn_key k = { .client = p.daddr, .server = p.saddr, .client_port = tcp->dest, .server_port = tcp->source };
        __u32 hdrs = (__u32)((void *)tcp - (void *)(long)skb->data) + tcp->doff * 4;
        struct body_range *range = 0;
        if (snap == HEAD_SNAP || is_head_alone(skb, tcp, hdrs, p.payload)) {
            // A new response: its body's range, or none (a range left from the last one, an
            // answer to HEAD or a transfer cut short, ends here).
            __u32 head = arm_body_cut(skb, tcp, hdrs, p.payload, &k);
            if (head)
                snap = head;
            else
                bpf_map_delete_elem(&unread, &k);
        } else {
            range = bpf_map_lookup_elem(&unread, &k);
        }
        if (range) {
            __u32 seq = bpf_ntohl(tcp->seq), end = range->until;
            __u64 beyond = range->beyond;
            __s32 past = (__s32)(seq + p.payload - end);
            // A segment that starts with a response head ends the range whatever it says (a
            // length the kernel misread, an answer to HEAD): it is reported as it was.
            if (past <= 0 && starts_response(skb, hdrs, p.payload)) {
                past = 1;
                beyond = 0;
            }
            if (past <= 0) {
                snap = hdrs;
                count(C_BODY_CUT);
                // Inside the range the engine hears of the body once a MiB of its sequence
                // space (the time and the bytes so far: its connection stays alive, its
                // transfer timed) and at its end; the other segments are not reported at all
                // (the engine's stream takes the holes as absent bytes).
                if (past < 0 && !tcp->fin && !tcp->rst && ((seq + p.payload) >> 20) == (seq >> 20)) {
                    count(C_BODY_SILENT);
                    return TC_ACT_OK;
                }
            }
            if (past >= 0 && beyond > 0) {
                // The next part of a long body (this segment, across the part's end, whole).
                __u64 step = beyond < RANGE_STEP ? beyond : RANGE_STEP;
                struct body_range next = { .until = end + (__u32)step, .beyond = beyond - step };
                bpf_map_update_elem(&unread, &k, &next, BPF_ANY);
            } else if (past >= 0) {
                bpf_map_delete_elem(&unread, &k);
            }
        }
    }
    if (p.v4 && side == FLAG_FROM_SERVER && (tcp->fin || tcp->rst)) {
        // The server closes: no body of this connection goes on (its range, if any, ends).
        struct conn_key k = { .client = p.daddr, .server = p.saddr, .client_port = tcp->dest, .server_port = tcp->source };
        bpf_map_delete_elem(&unread, &k);
    }
    count(C_OBSERVED);
    report(skb, shard_in(cfg, to_server ? p.skey : p.dkey), KIND_OBSERVED, side, 0, snap);
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
