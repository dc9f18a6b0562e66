/*
 * Where a function's CFI toggles return address signing: the
 * DW_CFA_AARCH64_negate_ra_state opcodes libunwind before 1.7 cannot
 * interpret on arm64 (symbolize/unwind.c says what is done with them).
 *
 * The FDE is found in the .eh_frame_hdr binary-search table libunwind
 * itself searches, the CIE from the FDE, and both programs are decoded
 * opcode by opcode, since a byte 0x2d is as likely an operand. All of it
 * is the target's memory, so hostile: every read is bounded by the entry's
 * length and that by MAX_CFI_ENTRY, a LEB128 by its ten bytes, the table
 * search by its count. Anything not understood (an opcode from a newer
 * DWARF, an augmentation of unknown size) ends the decoding: what was
 * found so far stands, and libunwind meets the rest as it would anyway.
 */
#include <dwarf.h>
#include <stdbool.h>
#include <stdint.h>

#include "symbolize/symbolize.h"

/* A CIE or FDE longer than this is not one a compiler wrote. */
#define MAX_CFI_ENTRY (1u << 20)

/* Target memory read byte by byte through a small window, never past end. */
struct cfi_rd {
	const struct spy_mem *mem;
	spy_addr_t at, end;
	spy_addr_t win_at;
	size_t win_len;
	bool bad;
	uint8_t win[256];
};

static uint8_t rd_u8(struct cfi_rd *r)
{
	if (r->bad || r->at >= r->end) {
		r->bad = true;
		return 0;
	}
	if (r->at < r->win_at || r->at - r->win_at >= r->win_len) {
		size_t len = r->end - r->at < sizeof(r->win) ? (size_t)(r->end - r->at) : sizeof(r->win);
		if (spy_mem_read(r->mem, r->at, r->win, len) < 0) {
			r->bad = true;
			return 0;
		}
		r->win_at = r->at;
		r->win_len = len;
	}
	return r->win[r->at++ - r->win_at];
}

static void rd_skip(struct cfi_rd *r, uint64_t n)
{
	if (r->bad || n > r->end - r->at) {
		r->bad = true;
		return;
	}
	r->at += n;
}

static uint32_t rd_u32(struct cfi_rd *r)
{
	uint32_t v = 0;
	for (unsigned i = 0; i < 4; i++) {
		v |= (uint32_t)rd_u8(r) << (8 * i);
	}
	return v;
}

/* An unsigned LEB128; a signed one is as long, which is all a skip needs. */
static uint64_t rd_leb(struct cfi_rd *r)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 70; shift += 7) {
		uint8_t b = rd_u8(r);
		if (shift < 64) {
			v |= (uint64_t)(b & 0x7f) << shift;
		}
		if (!(b & 0x80) || r->bad) {
			return v;
		}
	}
	r->bad = true;
	return 0;
}

/* Past a pointer of DWARF encoding enc (its format, the low half, is its size). */
static void rd_skip_encoded(struct cfi_rd *r, uint8_t enc)
{
	if (enc == DW_EH_PE_omit) {
		return;
	}
	if ((enc & 0x70) == DW_EH_PE_aligned) {
		r->bad = true;
		return;
	}
	switch (enc & 0x0f) {
	case DW_EH_PE_absptr:
	case DW_EH_PE_udata8:
	case DW_EH_PE_sdata8:
		rd_skip(r, 8);
		break;
	case DW_EH_PE_udata4:
	case DW_EH_PE_sdata4:
		rd_skip(r, 4);
		break;
	case DW_EH_PE_udata2:
	case DW_EH_PE_sdata2:
		rd_skip(r, 2);
		break;
	case DW_EH_PE_uleb128:
	case DW_EH_PE_sleb128:
		rd_leb(r);
		break;
	default:
		r->bad = true;
	}
}

/* Where the opcodes found go. */
struct ops {
	spy_addr_t *v;
	size_t n, max;
};

static void note_ra_op(struct ops *o, spy_addr_t at)
{
	/* Past max, libunwind meets the rest and stops there, as without any of this. */
	if (o->n < o->max) {
		o->v[o->n++] = at;
	}
}

/* Note the negate_ra_state opcodes of the program in [r->at, r->end). */
static void scan_cfa_program(struct ops *o, struct cfi_rd *r, uint8_t fde_enc)
{
	while (!r->bad && r->at < r->end) {
		spy_addr_t at = r->at;
		uint8_t op = rd_u8(r);
		if ((op & 0xc0) == DW_CFA_offset) {
			rd_leb(r);
			continue;
		}
		if ((op & 0xc0) != 0) {
			continue; /* advance_loc, restore: the operand is in the opcode */
		}
		switch (op) {
		case DW_CFA_nop:
		case DW_CFA_remember_state:
		case DW_CFA_restore_state:
			break;
		case DW_CFA_set_loc:
			rd_skip_encoded(r, fde_enc);
			break;
		case DW_CFA_advance_loc1:
			rd_skip(r, 1);
			break;
		case DW_CFA_advance_loc2:
			rd_skip(r, 2);
			break;
		case DW_CFA_advance_loc4:
			rd_skip(r, 4);
			break;
		case DW_CFA_offset_extended:
		case DW_CFA_register:
		case DW_CFA_def_cfa:
		case DW_CFA_offset_extended_sf:
		case DW_CFA_def_cfa_sf:
		case DW_CFA_val_offset:
		case DW_CFA_val_offset_sf:
		case DW_CFA_GNU_negative_offset_extended:
			rd_leb(r);
			rd_leb(r);
			break;
		case DW_CFA_restore_extended:
		case DW_CFA_undefined:
		case DW_CFA_same_value:
		case DW_CFA_def_cfa_register:
		case DW_CFA_def_cfa_offset:
		case DW_CFA_def_cfa_offset_sf:
		case DW_CFA_GNU_args_size:
			rd_leb(r);
			break;
		case DW_CFA_def_cfa_expression:
			rd_skip(r, rd_leb(r));
			break;
		case DW_CFA_expression:
		case DW_CFA_val_expression:
			rd_leb(r);
			rd_skip(r, rd_leb(r));
			break;
		case DW_CFA_AARCH64_negate_ra_state:
			note_ra_op(o, at);
			break;
		default:
			return;
		}
	}
}

/* Scan the program of the CIE at cie; false if its header is not understood. */
static bool scan_cie(const struct spy_mem *mem, struct ops *o, spy_addr_t cie, uint8_t *fde_enc, bool *z)
{
	struct cfi_rd r = { .mem = mem, .at = cie, .end = cie + 4 };
	uint32_t len = rd_u32(&r);
	/* 0xffffffff, 64-bit DWARF's escape, is past the bound too: no eh_frame has it. */
	if (r.bad || len == 0 || len > MAX_CFI_ENTRY) {
		return false;
	}
	r.end = cie + 4 + len;
	uint32_t id = rd_u32(&r);
	uint8_t version = rd_u8(&r);
	if (r.bad || id != 0 || (version != 1 && version != 3 && version != 4)) {
		return false;
	}
	char aug[8];
	size_t na = 0;
	for (uint8_t ch; (ch = rd_u8(&r)) != 0;) {
		if (r.bad || na == sizeof(aug) - 1) {
			return false;
		}
		aug[na++] = (char)ch;
	}
	if (version == 4) {
		rd_skip(&r, 2); /* address and segment selector sizes */
	}
	rd_leb(&r); /* code alignment */
	rd_leb(&r); /* data alignment */
	if (version == 1) {
		rd_skip(&r, 1); /* return address column */
	} else {
		rd_leb(&r);
	}
	*fde_enc = DW_EH_PE_absptr;
	*z = na > 0 && aug[0] == 'z';
	if (*z) {
		uint64_t alen = rd_leb(&r);
		if (r.bad || alen > r.end - r.at) {
			return false;
		}
		spy_addr_t end = r.at + alen;
		for (size_t i = 1; i < na; i++) {
			if (aug[i] == 'R') {
				*fde_enc = rd_u8(&r);
			} else if (aug[i] == 'L') {
				rd_skip(&r, 1);
			} else if (aug[i] == 'P') {
				rd_skip_encoded(&r, rd_u8(&r));
			} else if (aug[i] != 'S' && aug[i] != 'B' && aug[i] != 'G') {
				return false; /* its data's size is unknown, and so where 'R' is */
			}
		}
		if (r.bad) {
			return false;
		}
		r.at = end;
	} else if (na > 0) {
		return false;
	}
	scan_cfa_program(o, &r, *fde_enc);
	return true;
}

/* Scan the programs of the FDE at fde and of its CIE. */
static void scan_fde(const struct spy_mem *mem, struct ops *o, spy_addr_t fde)
{
	struct cfi_rd r = { .mem = mem, .at = fde, .end = fde + 8 };
	uint32_t len = rd_u32(&r);
	if (r.bad || len < 4 || len > MAX_CFI_ENTRY) {
		return;
	}
	r.end = fde + 4 + len;
	spy_addr_t id_at = r.at;
	uint32_t back = rd_u32(&r);
	uint8_t enc;
	bool z;
	/* In .eh_frame the CIE pointer counts back from where it sits. */
	if (r.bad || back == 0 || back > id_at || !scan_cie(mem, o, id_at - back, &enc, &z)) {
		return;
	}
	rd_skip_encoded(&r, enc);        /* initial location */
	rd_skip_encoded(&r, enc & 0x0f); /* address range: the format alone */
	if (z) {
		rd_skip(&r, rd_leb(&r));
	}
	scan_cfa_program(o, &r, enc);
}

/* The FDE the table gives for ip: its last entry starting at or before ip; 0 if none. */
static spy_addr_t fde_for(const struct spy_mem *mem, spy_addr_t hdr, spy_addr_t table, size_t count,
			  spy_addr_t ip)
{
	size_t lo = 0, hi = count;
	int32_t e[2];
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (spy_mem_read(mem, table + 8 * (spy_addr_t)mid, e, sizeof(e)) < 0) {
			return 0;
		}
		if (hdr + (spy_addr_t)(int64_t)e[0] <= ip) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	if (lo == 0 || spy_mem_read(mem, table + 8 * (spy_addr_t)(lo - 1), e, sizeof(e)) < 0) {
		return 0;
	}
	return hdr + (spy_addr_t)(int64_t)e[1];
}

size_t sym_cfi_ra_state_ops(const struct spy_mem *mem, spy_addr_t hdr, spy_addr_t table,
			    size_t count, spy_addr_t ip, spy_addr_t *ops, size_t max)
{
	struct ops o = { .v = ops, .max = max };
	spy_addr_t fde = count <= SYM_CFI_MAX_TABLE ? fde_for(mem, hdr, table, count, ip) : 0;
	if (fde) {
		scan_fde(mem, &o, fde);
	}
	return o.n;
}
