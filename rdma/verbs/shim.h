// shim.h declares the C side of the verbs provider: flat, union-free
// structs that Go fills and reads directly, and wrappers around the
// static-inline parts of libibverbs (post, poll, notify, GID queries) that
// cgo cannot call.
#ifndef OCTOFS_VERBS_SHIM_H
#define OCTOFS_VERBS_SHIM_H

#include <stdint.h>
#include <infiniband/verbs.h>

// octo_send is one send work request. Its SGEs are sges[sge_off :
// sge_off+num_sge] of the array passed with it.
struct octo_send {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t rkey;
	uint32_t imm; // host byte order
	uint32_t num_sge;
	uint32_t sge_off;
	uint32_t opcode; // enum ibv_wr_opcode
	uint32_t flags;  // IBV_SEND_*
};

struct octo_recv {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t sge_off;
};

// octo_wc is a work completion with the immediate in host byte order.
struct octo_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t wc_flags;
	uint32_t vendor_err;
	uint32_t pad;
};

// octo_gid is one GID table entry.
struct octo_gid {
	uint8_t gid[16];
	uint32_t index;
	uint32_t type;     // IBV_GID_TYPE_*
	uint32_t ifindex;  // netdev of a RoCE GID, 0 for IB
	uint32_t pad;
};

int octo_post_send(struct ibv_qp *qp, const struct octo_send *ws, int n,
		   struct ibv_sge *sges, struct ibv_send_wr *scratch, int *bad);
int octo_post_recv(struct ibv_qp *qp, const struct octo_recv *ws, int n,
		   struct ibv_sge *sges, struct ibv_recv_wr *scratch, int *bad);
int octo_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *scratch, struct octo_wc *out);
int octo_req_notify_cq(struct ibv_cq *cq);
int octo_get_cq_event(struct ibv_comp_channel *ch);
int octo_gid_table(struct ibv_context *ctx, uint8_t port, struct octo_gid *out, int max);
int octo_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		   uint32_t max_send_wr, uint32_t max_recv_wr, uint32_t max_send_sge,
		   uint32_t max_recv_sge, uint32_t max_inline, int sig_all,
		   struct ibv_qp **out, struct ibv_qp_cap *granted);
int octo_query_qp_state(struct ibv_qp *qp, int *state);
int octo_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
void octo_set_rtr(struct ibv_qp_attr *attr, uint32_t dest_qpn, uint32_t rq_psn,
		  int mtu, uint8_t max_dest_rd_atomic, uint8_t min_rnr_timer,
		  uint16_t dlid, const uint8_t *dgid, int global, uint8_t sgid_index,
		  uint8_t port);
int octo_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev,
			 uint32_t *type, void **element);
int octo_set_nonblock(int fd);
int octo_max_inline(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t limit);
int octo_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
struct ibv_mr *octo_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access);

#endif
