// SPDX-License-Identifier: GPL-2.0
// rlm fast path: egress classifier. Puts each outbound flow into the priority class the engine
// chose for it (SRPT by remaining response size, later issues) by setting skb->priority to an
// HTB classid; counts packets per class. Maps are the only interface with the engine.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_CLASSES 16

// A flow as it leaves: addresses and ports in network byte order (as on the wire).
struct flow_key {
    __u32 saddr;
    __u32 daddr;
    __u16 sport;
    __u16 dport;
};

// flow → HTB classid (major:minor packed as in TC_H_MAKE) to put its packets in.
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, struct flow_key);
    __type(value, __u32);
} flow_class SEC(".maps");

// Packets and bytes sent per class slot (the classid's minor number modulo MAX_CLASSES).
struct class_count {
    __u64 packets;
    __u64 bytes;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, MAX_CLASSES);
    __type(key, __u32);
    __type(value, struct class_count);
} class_stats SEC(".maps");

// Slot 0: the classid of flows the engine has not classified (0: leave the packet alone).
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u32);
} config SEC(".maps");

SEC("classifier")
int classify(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
        return TC_ACT_OK;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > data_end || ip->ihl < 5)
        return TC_ACT_OK;
    if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
        return TC_ACT_OK;
    // Both TCP and UDP start with the two ports.
    __u16 *ports = (void *)ip + ip->ihl * 4;
    if ((void *)(ports + 2) > data_end)
        return TC_ACT_OK;

    struct flow_key key = { .saddr = ip->saddr, .daddr = ip->daddr, .sport = ports[0], .dport = ports[1] };
    __u32 zero = 0;
    __u32 classid = 0;
    __u32 *c = bpf_map_lookup_elem(&flow_class, &key);
    if (c) {
        classid = *c;
    } else {
        __u32 *d = bpf_map_lookup_elem(&config, &zero);
        if (d)
            classid = *d;
    }
    if (!classid)
        return TC_ACT_OK;
    skb->priority = classid;
    __u32 slot = (classid & 0xffff) % MAX_CLASSES;
    struct class_count *s = bpf_map_lookup_elem(&class_stats, &slot);
    if (s) {
        s->packets += 1;
        s->bytes += skb->len;
    }
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
