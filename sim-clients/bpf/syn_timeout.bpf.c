// SPDX-License-Identifier: GPL-2.0
// rlm lab: the initial SYN retransmission timeout of the sockets of one cgroup (the emulated
// browsers of a client profile, e.g. Windows XP's 3 s of the RLM paper). Answers
// BPF_SOCK_OPS_TIMEOUT_INIT with the timeout in jiffies, which user space writes into
// `timeout_jiffies` (it knows the kernel's HZ). Everything else is left alone (-1).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u32);
} timeout_jiffies SEC(".maps");

// Times the program answered, for tests and the lab's report.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} answered SEC(".maps");

SEC("sockops")
int syn_timeout(struct bpf_sock_ops *skops)
{
    int reply = -1;
    if (skops->op == BPF_SOCK_OPS_TIMEOUT_INIT) {
        __u32 zero = 0;
        __u32 *j = bpf_map_lookup_elem(&timeout_jiffies, &zero);
        if (j && *j) {
            reply = *j;
            __u64 *n = bpf_map_lookup_elem(&answered, &zero);
            if (n)
                __sync_fetch_and_add(n, 1);
        }
    }
    skops->reply = reply;
    return 1;
}

char LICENSE[] SEC("license") = "GPL";
