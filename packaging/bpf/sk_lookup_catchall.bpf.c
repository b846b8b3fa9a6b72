// SPDX-License-Identifier: GPL-2.0-only
/*
 * valis's sk_lookup steer: connections to a declared port on the unit address reach
 * the node's one listening socket, whatever port that socket is bound on.
 *
 * fulcrum attaches this program to the unit's network namespace and fills the maps:
 *   valis_unit    slot 0: the unit's IPv4 address, slot 1: its IPv6 address (network
 *                 byte order; a slot whose `set` is 0 matches nothing);
 *   valis_ports   the declared ports (host byte order), any value;
 *   valis_socket  slot 0: the node's listening TCP socket; slot 1 would hold a UDP
 *                 socket, which fulcrum never fills: a steered UDP socket's replies
 *                 leave from its own port, so only TCP is steered.
 * A lookup that is not for the unit address, not for a declared port, or finds no
 * socket for its protocol is passed over without an assignment, so the kernel's own
 * lookup runs and the firewall decides (it drops what nothing accepts). Replacing the
 * socket in valis_socket is atomic: a lookup sees the old socket or the new one.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#define AF_INET 2
#define AF_INET6 10
#define MAX_PORTS 64
struct unit_address {
	__u32 set;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct unit_address);
} valis_unit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u16);
	__type(value, __u8);
} valis_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} valis_socket SEC(".maps");

static __always_inline int for_unit(struct bpf_sk_lookup *ctx)
{
	/* Every context field is read once, unconditionally, at its own offset: the
	 * verifier refuses a context pointer the compiler has offset to share one load
	 * between the IPv4 and IPv6 comparisons. */
	__u32 family = ctx->family;
	__u32 ip4 = ctx->local_ip4;
	__u32 ip6_0 = ctx->local_ip6[0], ip6_1 = ctx->local_ip6[1];
	__u32 ip6_2 = ctx->local_ip6[2], ip6_3 = ctx->local_ip6[3];
	__u32 slot = family == AF_INET6 ? 1 : 0;
	struct unit_address *unit = bpf_map_lookup_elem(&valis_unit, &slot);

	if (!unit || !unit->set)
		return 0;
	if (family == AF_INET)
		return ip4 == unit->addr[0];
	if (family == AF_INET6)
		return ip6_0 == unit->addr[0] && ip6_1 == unit->addr[1] &&
		       ip6_2 == unit->addr[2] && ip6_3 == unit->addr[3];
	return 0;
}

SEC("sk_lookup")
int valis_steer(struct bpf_sk_lookup *ctx)
{
	__u16 port = ctx->local_port;
	__u32 slot;
	struct bpf_sock *sk;

	if (ctx->protocol == IPPROTO_TCP)
		slot = 0;
	else if (ctx->protocol == IPPROTO_UDP)
		slot = 1;
	else
		return SK_PASS;
	if (!for_unit(ctx) || !bpf_map_lookup_elem(&valis_ports, &port))
		return SK_PASS;
	sk = bpf_map_lookup_elem(&valis_socket, &slot);
	if (!sk)
		return SK_PASS;
	/* A socket of the wrong family is refused by the helper: pass over, do not drop. */
	bpf_sk_assign(ctx, sk, 0);
	bpf_sk_release(sk);
	return SK_PASS;
}

char _license[] SEC("license") = "GPL";
