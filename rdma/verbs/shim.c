//go:build verbs && cgo

#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

int octo_post_send(struct ibv_qp *qp, const struct octo_send *ws, int n,
		   struct ibv_sge *sges, struct ibv_send_wr *scratch, int *bad)
{
	struct ibv_send_wr *bad_wr = NULL;
	int i, rc;

	*bad = -1;
	if (n <= 0)
		return 0;
	for (i = 0; i < n; i++) {
		const struct octo_send *w = &ws[i];
		struct ibv_send_wr *s = &scratch[i];

		memset(s, 0, sizeof(*s));
		s->wr_id = w->wr_id;
		s->next = i + 1 < n ? &scratch[i + 1] : NULL;
		s->sg_list = w->num_sge ? &sges[w->sge_off] : NULL;
		s->num_sge = (int)w->num_sge;
		s->opcode = (enum ibv_wr_opcode)w->opcode;
		s->send_flags = w->flags;
		switch (s->opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			s->imm_data = htonl(w->imm);
			break;
		default:
			break;
		}
		switch (s->opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			s->wr.rdma.remote_addr = w->remote_addr;
			s->wr.rdma.rkey = w->rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			s->wr.atomic.remote_addr = w->remote_addr;
			s->wr.atomic.rkey = w->rkey;
			s->wr.atomic.compare_add = w->compare_add;
			s->wr.atomic.swap = w->swap;
			break;
		default:
			break;
		}
	}
	rc = ibv_post_send(qp, scratch, &bad_wr);
	if (rc != 0)
		*bad = bad_wr ? (int)(bad_wr - scratch) : 0;
	return rc;
}

int octo_post_recv(struct ibv_qp *qp, const struct octo_recv *ws, int n,
		   struct ibv_sge *sges, struct ibv_recv_wr *scratch, int *bad)
{
	struct ibv_recv_wr *bad_wr = NULL;
	int i, rc;

	*bad = -1;
	if (n <= 0)
		return 0;
	for (i = 0; i < n; i++) {
		struct ibv_recv_wr *r = &scratch[i];

		r->wr_id = ws[i].wr_id;
		r->next = i + 1 < n ? &scratch[i + 1] : NULL;
		r->sg_list = ws[i].num_sge ? &sges[ws[i].sge_off] : NULL;
		r->num_sge = (int)ws[i].num_sge;
	}
	rc = ibv_post_recv(qp, scratch, &bad_wr);
	if (rc != 0)
		*bad = bad_wr ? (int)(bad_wr - scratch) : 0;
	return rc;
}

int octo_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *scratch, struct octo_wc *out)
{
	int got, i;

	got = ibv_poll_cq(cq, n, scratch);
	for (i = 0; i < got; i++) {
		const struct ibv_wc *w = &scratch[i];
		struct octo_wc *o = &out[i];

		o->wr_id = w->wr_id;
		o->status = w->status;
		o->opcode = w->opcode;
		o->byte_len = w->byte_len;
		o->imm = (w->wc_flags & IBV_WC_WITH_IMM) ? ntohl(w->imm_data) : 0;
		o->qp_num = w->qp_num;
		o->wc_flags = w->wc_flags;
		o->vendor_err = w->vendor_err;
	}
	return got;
}

int octo_req_notify_cq(struct ibv_cq *cq)
{
	return ibv_req_notify_cq(cq, 0);
}

// octo_get_cq_event consumes one event of a non-blocking channel and acks
// it at once (the provider does not batch acks: it has one CQ per channel
// and acks are cheap). It returns 0, or -1 with errno (EAGAIN: none yet).
int octo_get_cq_event(struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(ch, &cq, &ctx) != 0)
		return -1;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

// octo_gid_table lists the port's valid GIDs with their types. rdma-core's
// ibv_query_gid_table reads them from the kernel; older kernels without
// that ioctl fall back to sysfs (gid_attrs/types/N).
int octo_gid_table(struct ibv_context *ctx, uint8_t port, struct octo_gid *out, int max)
{
	struct ibv_port_attr pa;
	struct ibv_device_attr da;
	struct ibv_gid_entry *all;
	ssize_t got;
	int i, n = 0;

	if (ibv_query_port(ctx, port, &pa) != 0)
		return -1;
	// One call for every valid entry of every port (rxe's table has 1024
	// slots; querying them one by one costs a system call each).
	if (ibv_query_device(ctx, &da) == 0 && pa.gid_tbl_len > 0) {
		size_t cap = (size_t)pa.gid_tbl_len * (da.phys_port_cnt ? da.phys_port_cnt : 1);

		all = calloc(cap, sizeof(*all));
		if (all) {
			got = ibv_query_gid_table(ctx, all, cap, 0);
			for (i = 0; i < got && n < max; i++) {
				if (all[i].port_num != port)
					continue;
				memcpy(out[n].gid, all[i].gid.raw, 16);
				out[n].index = all[i].gid_index;
				out[n].type = all[i].gid_type;
				out[n].ifindex = all[i].ndev_ifindex;
				n++;
			}
			free(all);
			if (got >= 0)
				return n;
		}
	}
	n = 0;
	for (i = 0; i < pa.gid_tbl_len && n < max; i++) {
		struct ibv_gid_entry e;
		union ibv_gid zero;

		memset(&zero, 0, sizeof(zero));
		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0) != 0) {
			char path[512], buf[64];
			FILE *f;

			// ENODATA: an empty slot. Anything else: try sysfs.
			if (errno == ENODATA)
				continue;
			if (ibv_query_gid(ctx, port, i, &e.gid) != 0 ||
			    memcmp(&e.gid, &zero, sizeof(zero)) == 0)
				continue;
			e.gid_type = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ?
					     IBV_GID_TYPE_IB : IBV_GID_TYPE_ROCE_V1;
			e.ndev_ifindex = 0;
			snprintf(path, sizeof(path),
				 "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
				 ibv_get_device_name(ctx->device), port, i);
			f = fopen(path, "r");
			if (f) {
				if (fgets(buf, sizeof(buf), f) && strstr(buf, "v2"))
					e.gid_type = IBV_GID_TYPE_ROCE_V2;
				fclose(f);
			}
		}
		if (memcmp(&e.gid, &zero, sizeof(zero)) == 0)
			continue;
		memcpy(out[n].gid, e.gid.raw, 16);
		out[n].index = (uint32_t)i;
		out[n].type = e.gid_type;
		out[n].ifindex = e.ndev_ifindex;
		n++;
	}
	return n;
}

int octo_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		   uint32_t max_send_wr, uint32_t max_recv_wr, uint32_t max_send_sge,
		   uint32_t max_recv_sge, uint32_t max_inline, int sig_all,
		   struct ibv_qp **out, struct ibv_qp_cap *granted)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp *qp;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = sig_all;
	ia.cap.max_send_wr = max_send_wr;
	ia.cap.max_recv_wr = max_recv_wr;
	ia.cap.max_send_sge = max_send_sge;
	ia.cap.max_recv_sge = max_recv_sge;
	ia.cap.max_inline_data = max_inline;
	qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return errno ? errno : EINVAL;
	/* ibv_create_qp writes the sizes the device granted into ia.cap. */
	*granted = ia.cap;
	*out = qp;
	return 0;
}

int octo_query_qp_state(struct ibv_qp *qp, int *state)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr ia;
	int rc;

	rc = ibv_query_qp(qp, &attr, IBV_QP_STATE, &ia);
	if (rc == 0)
		*state = attr.qp_state;
	return rc;
}

int octo_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return ibv_modify_qp(qp, attr, mask);
}

void octo_set_rtr(struct ibv_qp_attr *attr, uint32_t dest_qpn, uint32_t rq_psn,
		  int mtu, uint8_t max_dest_rd_atomic, uint8_t min_rnr_timer,
		  uint16_t dlid, const uint8_t *dgid, int global, uint8_t sgid_index,
		  uint8_t port)
{
	attr->qp_state = IBV_QPS_RTR;
	attr->path_mtu = (enum ibv_mtu)mtu;
	attr->dest_qp_num = dest_qpn;
	attr->rq_psn = rq_psn;
	attr->max_dest_rd_atomic = max_dest_rd_atomic;
	attr->min_rnr_timer = min_rnr_timer;
	attr->ah_attr.dlid = dlid;
	attr->ah_attr.sl = 0;
	attr->ah_attr.src_path_bits = 0;
	attr->ah_attr.port_num = port;
	attr->ah_attr.is_global = global ? 1 : 0;
	if (global) {
		memcpy(attr->ah_attr.grh.dgid.raw, dgid, 16);
		attr->ah_attr.grh.sgid_index = sgid_index;
		attr->ah_attr.grh.hop_limit = 64;
		attr->ah_attr.grh.traffic_class = 0;
		attr->ah_attr.grh.flow_label = 0;
	}
}

int octo_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev,
			 uint32_t *type, void **element)
{
	if (ibv_get_async_event(ctx, ev) != 0)
		return -1;
	*type = ev->event_type;
	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR:
		*element = ev->element.cq;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*element = ev->element.qp;
		break;
	default:
		*element = NULL;
		break;
	}
	ibv_ack_async_event(ev);
	return 0;
}

int octo_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// octo_max_inline finds the largest inline size (up to limit) an RC queue
// pair of this device accepts, by creating probe queue pairs: verbs has no
// device attribute for it.
int octo_max_inline(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t limit)
{
	uint32_t lo = 0, hi = limit;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;
		struct ibv_qp_init_attr ia;
		struct ibv_qp *qp;

		memset(&ia, 0, sizeof(ia));
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = 1;
		ia.cap.max_recv_wr = 1;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.cap.max_inline_data = mid;
		qp = ibv_create_qp(pd, &ia);
		if (qp) {
			if (ia.cap.max_inline_data > mid)
				mid = ia.cap.max_inline_data < limit ? ia.cap.max_inline_data : limit;
			ibv_destroy_qp(qp);
			lo = mid;
		} else {
			hi = mid - 1;
		}
	}
	return (int)lo;
}

// octo_reg_mr takes the address as an integer: the memory is the caller's
// mmap or C memory, never a Go pointer.
struct ibv_mr *octo_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access)
{
	return ibv_reg_mr(pd, (void *)addr, len, access);
}

// octo_query_port wraps ibv_query_port, a macro in verbs.h.
int octo_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}
