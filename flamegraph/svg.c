/*
 * The SVG flame graph: one self-contained file (inline CSS and script, no
 * network) drawn from the profile's trie (fg_tree), with a header from the
 * metadata, hover details, click to zoom, reset/Escape, and search.
 *
 * The decision a newcomer would question: the frames are not SVG elements
 * in the file. The file carries them as compact JavaScript arrays (a string
 * table, a frame table, and the trie's nodes in depth-first order as four
 * integers each) and the embedded script draws them. Markup per frame would
 * cost ~100 bytes each, and the browser would parse and lay out elements it
 * must anyway rebuild on zoom; the arrays cost ~15 bytes a node, and the
 * script draws only what the current zoom shows. The header (title and
 * metadata) is static markup, so the file says what it is even where
 * scripts do not run (an <img> tag).
 *
 * Size is bounded by the picture, not by the profile: a node narrower than
 * one pixel of the full graph (FG_SVG_WIDTH) is not emitted; the narrow
 * children of a node are summed into one "merged" block drawn after its
 * other children (or dropped, if even together they are under a pixel).
 * Every level of the graph sums to at most the root, so at most
 * FG_SVG_WIDTH nodes per level are emitted whatever the number of stacks.
 *
 * Target strings are hostile. They reach the file in two contexts, each
 * with one escaper, and both write pure ASCII so the file's encoding can
 * never be wrong: xml_escape (text and attribute values: entities and
 * numeric references) and js_escape (a double-quoted string inside the
 * script's CDATA section: "<", ">" and "&" as \x escapes, so neither "]]>"
 * nor "</script" can appear; everything outside printable ASCII as \u
 * escapes, U+2028/U+2029 included). Invalid UTF-8 decodes to U+FFFD.
 *
 * Colours, fixed at write time so the same code keeps its colour across
 * runs: a Python frame gets a warm colour and a native frame a cool one,
 * each picked by a hash of its file (module or library), so one module's
 * frames share a colour; a synthetic frame is grey (the process and thread
 * roots cmd adds), or violet-grey when its name says it is a thread state,
 * not code (fg_frame_is_state: "idle", "waiting for the GIL", "[idle]").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

/* Width of the drawing in pixels; the narrowest node emitted is one of them. */
#define FG_SVG_WIDTH 1200
/* Horizontal margin, height of one frame, and the top of the graph. */
#define FG_SVG_PAD 10
#define FG_SVG_FRAME_H 16
#define FG_SVG_TOP 112
#define FG_SVG_BOTTOM 34
/* Output is built in a buffer and written out in pieces of about this size. */
#define FG_SVG_FLUSH_AT (256 * 1024)

/* Colour classes, as the script knows them. */
enum svg_class {
	SVG_PYTHON = 0,
	SVG_NATIVE = 1,
	SVG_ROOT = 2,
	SVG_IDLE = 3,
};

/* Node "frame" values for the two nodes that have no profile frame. */
#define SVG_NODE_ALL (-1)
#define SVG_NODE_MERGED (-2)

struct svg {
	FILE *f;
	const struct fg_profile *p;
	struct fg_tree t;
	bool inverted;
	int io_errno;        /* first write error, 0 if none */
	struct spy_buf out;  /* text not yet written to f */

	/* Profile frame id -> index in the emitted frame table, FG_NONE if unused. */
	uint32_t *fmap;
	uint32_t *frames;    /* emitted frame table: profile frame ids */
	size_t nframes;
	struct spy_hmap strs;  /* interned string -> its index in strv */
	const char **strv;   /* the string table, in index order */
	size_t nstrs, strs_alloc;

	struct spy_buf nodes; /* the node array's text */
	size_t nnodes;
	uint32_t maxdepth;

	/* The caller's styling (fg_svg_style.frame_style): its tooltip lines
	 * are interned here so str_index can key them by pointer too. */
	const struct fg_svg_style *style;
	struct spy_strtab notes;
	struct spy_buf note;
};

/* ---- escaping ------------------------------------------------------------ */

/*
 * Decode one code point at *s (before end), advancing *s. Invalid UTF-8
 * (a stray continuation byte, an overlong form, a surrogate, beyond
 * U+10FFFF, a truncated sequence) gives U+FFFD and consumes one byte.
 */
static uint32_t utf8_next(const unsigned char **s, const unsigned char *end)
{
	const unsigned char *c = *s;
	uint32_t cp, min;
	size_t n;
	if (c[0] < 0x80) {
		*s = c + 1;
		return c[0];
	} else if (c[0] >= 0xc2 && c[0] <= 0xdf) {
		n = 1;
		cp = c[0] & 0x1f;
		min = 0x80;
	} else if (c[0] >= 0xe0 && c[0] <= 0xef) {
		n = 2;
		cp = c[0] & 0x0f;
		min = 0x800;
	} else if (c[0] >= 0xf0 && c[0] <= 0xf4) {
		n = 3;
		cp = c[0] & 0x07;
		min = 0x10000;
	} else {
		*s = c + 1;
		return 0xfffd;
	}
	if ((size_t)(end - c) < n + 1) {
		*s = c + 1;
		return 0xfffd;
	}
	for (size_t i = 1; i <= n; i++) {
		if ((c[i] & 0xc0) != 0x80) {
			*s = c + 1;
			return 0xfffd;
		}
		cp = (cp << 6) | (c[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
		*s = c + 1;
		return 0xfffd;
	}
	*s = c + n + 1;
	return cp;
}

/* True for a code point XML 1.0 does not allow, or that we do not want shown. */
static bool xml_unwanted(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0xfffe || cp == 0xffff;
}

/*
 * The one XML escaper, for text content and (double- or single-quoted)
 * attribute values alike. Output is ASCII: markup characters become
 * entities, other non-ASCII becomes numeric references, control characters
 * become '?', as in folded text.
 */
static void xml_escape(struct spy_buf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	const unsigned char *end = s + strlen((const char *)s);
	while (s < end) {
		uint32_t cp = utf8_next(&s, end);
		switch (cp) {
		case '&':
			spy_buf_adds(b, "&amp;");
			break;
		case '<':
			spy_buf_adds(b, "&lt;");
			break;
		case '>':
			spy_buf_adds(b, "&gt;");
			break;
		case '"':
			spy_buf_adds(b, "&quot;");
			break;
		case '\'':
			spy_buf_adds(b, "&#39;");
			break;
		default:
			if (xml_unwanted(cp)) {
				spy_buf_addch(b, '?');
			} else if (cp < 0x80) {
				spy_buf_addch(b, (char)cp);
			} else {
				spy_buf_addf(b, "&#x%" PRIX32 ";", cp);
			}
			break;
		}
	}
}

/*
 * The one script escaper: str as a double-quoted JavaScript string literal,
 * quotes included, to sit inside a CDATA section. Output is printable ASCII
 * without '<', '>' or '&', so it cannot end the CDATA section ("]]>"), close
 * the script ("</script"), or be read differently by an HTML parser.
 */
static void js_escape(struct spy_buf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	const unsigned char *end = s + strlen((const char *)s);
	spy_buf_addch(b, '"');
	while (s < end) {
		uint32_t cp = utf8_next(&s, end);
		if (cp == '"' || cp == '\\') {
			spy_buf_addch(b, '\\');
			spy_buf_addch(b, (char)cp);
		} else if (cp == '<' || cp == '>' || cp == '&') {
			spy_buf_addf(b, "\\x%02" PRIx32, cp);
		} else if (cp >= 0x20 && cp < 0x7f) {
			spy_buf_addch(b, (char)cp);
		} else if (cp < 0x10000) {
			spy_buf_addf(b, "\\u%04" PRIx32, cp);
		} else {
			cp -= 0x10000;
			spy_buf_addf(b, "\\u%04" PRIx32 "\\u%04" PRIx32,
				     0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
		}
	}
	spy_buf_addch(b, '"');
}

/* ---- output -------------------------------------------------------------- */

static void flush(struct svg *g, bool force)
{
	if (!g->out.len || (!force && g->out.len < FG_SVG_FLUSH_AT)) {
		return;
	}
	errno = 0;
	if (!g->io_errno && fwrite(g->out.buf, 1, g->out.len, g->f) != g->out.len) {
		g->io_errno = errno ? errno : EIO;
	}
	spy_buf_reset(&g->out);
}

/* ---- colours ------------------------------------------------------------- */

static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++) {
		h = (h ^ (unsigned char)*s) * 16777619u;
	}
	/* FNV's low bits are weak on short inputs; finish with a mix. */
	h ^= h >> 16;
	h *= 0x7feb352du;
	h ^= h >> 15;
	return h;
}

static enum svg_class frame_class(const struct fg_frame *fr)
{
	if (fr->kind == SPY_FRAME_NATIVE) {
		return SVG_NATIVE;
	}
	if (fr->kind == SPY_FRAME_SYNTHETIC) {
		return fg_frame_is_state(fr) ? SVG_IDLE : SVG_ROOT;
	}
	return SVG_PYTHON;
}

/* |v|, without libm (the module links only common and zlib). */
static double absd(double v)
{
	return v < 0 ? -v : v;
}

/* HSL (h in degrees, s and l in percent) to 0xRRGGBB. */
static uint32_t hsl_rgb(uint32_t h, uint32_t s, uint32_t l)
{
	double sf = s / 100.0, lf = l / 100.0;
	double c = (1.0 - absd(2.0 * lf - 1.0)) * sf;
	double hp = (h % 360) / 60.0;
	int sixth = (int)hp;
	double x = c * (1.0 - absd(hp - 2.0 * (double)(sixth / 2) - 1.0));
	double rgb[3] = { 0, 0, 0 };
	/* Which channel is c, which x, by the sixth of the circle. */
	static const int cx[6][2] = { { 0, 1 }, { 1, 0 }, { 1, 2 }, { 2, 1 }, { 2, 0 }, { 0, 2 } };
	rgb[cx[sixth][0]] = c;
	rgb[cx[sixth][1]] = x;
	double m = lf - c / 2.0;
	uint32_t out = 0;
	for (int i = 0; i < 3; i++) {
		out = (out << 8) | (uint32_t)((rgb[i] + m) * 255.0 + 0.5);
	}
	return out;
}

/* A frame's colour: the class picks the palette, the file the shade. */
static uint32_t frame_colour(const struct fg_frame *fr, enum svg_class cls)
{
	uint32_t h = fnv1a(fr->file ? fr->file : fr->func);
	switch (cls) {
	case SVG_PYTHON:
		/* red .. yellow-orange */
		return hsl_rgb(2 + h % 48, 70 + (h >> 8) % 20, 56 + (h >> 16) % 12);
	case SVG_NATIVE:
		/* teal .. blue */
		return hsl_rgb(175 + h % 50, 45 + (h >> 8) % 20, 58 + (h >> 16) % 12);
	case SVG_IDLE:
		return hsl_rgb(265 + h % 20, 18, 74 + (h >> 16) % 6);
	case SVG_ROOT:
		break;
	}
	return hsl_rgb(0, 0, 78 + (h >> 16) % 6);
}

uint32_t fg_svg_frame_colour(const struct fg_frame *fr, int *cls)
{
	enum svg_class c = frame_class(fr);
	*cls = (int)c;
	return frame_colour(fr, c);
}

/*
 * The caller's colour for fr, if it gives one, and the index in S of its
 * tooltip line, or -1 (fg_svg_style.frame_style).
 */
static uint32_t str_index(struct svg *g, const char *s);

static int64_t caller_style(struct svg *g, const struct fg_frame *fr, uint32_t *rgb)
{
	const struct fg_svg_style *o = g->style;
	uint32_t c = *rgb;
	if (!o || !o->frame_style) {
		return -1;
	}
	spy_buf_reset(&g->note);
	if (!o->frame_style(o->ctx, fr, &c, &g->note)) {
		return -1;
	}
	*rgb = c & 0xffffff;
	if (!g->note.len) {
		return -1;
	}
	return str_index(g, spy_strtab_intern(&g->notes, g->note.buf, g->note.len));
}

/* ---- the emitted tables -------------------------------------------------- */

/* Index of interned string s in the emitted string table, adding it if new. */
static uint32_t str_index(struct svg *g, const char *s)
{
	uint64_t k = (uint64_t)(uintptr_t)s;
	uint64_t v = spy_hmap_get(&g->strs, k);
	if (v != SPY_HMAP_NONE) {
		return (uint32_t)v;
	}
	spy_hmap_add(&g->strs, k, g->nstrs);
	SPY_GROW(g->strv, g->strs_alloc, g->nstrs + 1);
	g->strv[g->nstrs] = s;
	return (uint32_t)g->nstrs++;
}

static int64_t frame_index(struct svg *g, uint32_t fid)
{
	if (g->fmap[fid] == FG_NONE) {
		g->fmap[fid] = (uint32_t)g->nframes;
		g->frames[g->nframes++] = fid;
	}
	return g->fmap[fid];
}

static void add_node(struct svg *g, uint32_t depth, int64_t frame, uint64_t total, uint64_t self)
{
	if (g->nnodes) {
		spy_buf_addch(&g->nodes, ',');
	}
	/* A line break now and then keeps lines short for editors and diff. */
	if (g->nnodes && g->nnodes % 16 == 0) {
		spy_buf_addch(&g->nodes, '\n');
	}
	spy_buf_addf(&g->nodes, "%" PRIu32 ",%" PRId64 ",%" PRIu64 ",%" PRIu64, depth, frame, total, self);
	g->nnodes++;
	if (depth > g->maxdepth) {
		g->maxdepth = depth;
	}
}

struct walk {
	uint32_t node;
	uint32_t pos;        /* next child, as an index into t.child */
	uint64_t merged;     /* samples of narrow children */
	uint64_t nmerged;    /* how many narrow children */
};

/*
 * Emit the trie depth first, children in output order, leaving out nodes
 * under min samples: a node's narrow children become one merged node after
 * its other children when together they reach min.
 */
static void emit_nodes(struct svg *g, uint64_t min)
{
	const struct fg_tree *t = &g->t;
	struct walk *stack = spy_xmalloc((FG_MAX_DEPTH + 2) * sizeof(*stack));
	size_t sp = 0;
	add_node(g, 0, SVG_NODE_ALL, t->nodes[0].total, t->nodes[0].self);
	stack[sp++] = (struct walk){ 0, t->start[0], 0, 0 };
	while (sp) {
		struct walk *w = &stack[sp - 1];
		if (w->pos < t->start[w->node + 1]) {
			uint32_t c = t->child[w->pos++];
			const struct fg_node *n = &t->nodes[c];
			if (n->total >= min) {
				add_node(g, n->depth, frame_index(g, n->frame), n->total, n->self);
				if (sp >= FG_MAX_DEPTH + 2) {
					SPY_BUG("trie deeper than FG_MAX_DEPTH");
				}
				stack[sp++] = (struct walk){ c, t->start[c], 0, 0 };
			} else {
				w->merged += n->total;
				w->nmerged++;
			}
			continue;
		}
		if (w->merged && w->merged >= min) {
			/* For a merged node the "self" field is how many it stands for. */
			add_node(g, t->nodes[w->node].depth + 1, SVG_NODE_MERGED, w->merged, w->nmerged);
		}
		sp--;
	}
	free(stack);
}

static void emit_tables(struct svg *g)
{
	/*
	 * Strings and colours first seen in frame order, so the tables are
	 * deterministic. Colours go in a palette (P): there are as many as
	 * files, not frames, and the script then never builds a colour string.
	 */
	struct spy_buf ft = SPY_BUF_INIT, pal = SPY_BUF_INIT, notes = SPY_BUF_INIT, src = SPY_BUF_INIT;
	struct spy_hmap palette = SPY_HMAP_INIT; /* rgb -> index in P */
	for (size_t i = 0; i < g->nframes; i++) {
		const struct fg_frame *fr = fg_profile_frame(g->p, g->frames[i]);
		enum svg_class cls = frame_class(fr);
		uint32_t func = str_index(g, fr->func);
		int64_t file = fr->file ? (int64_t)str_index(g, fr->file) : -1;
		uint32_t rgb = frame_colour(fr, cls);
		int64_t note = caller_style(g, fr, &rgb);
		spy_buf_addf(&notes, "%s%" PRId64, i ? (i % 16 ? "," : ",\n") : "", note);
		/* The text kept of the frame's line, if any: the tooltip's source line. */
		const char *text = fr->kind == SPY_FRAME_PYTHON ? fg_profile_source(g->p, fr->file, fr->line) : NULL;
		spy_buf_addf(&src, "%s%" PRId64, i ? (i % 16 ? "," : ",\n") : "",
			     text ? (int64_t)str_index(g, text) : -1);
		uint64_t colour = spy_hmap_get(&palette, rgb);
		if (colour == SPY_HMAP_NONE) {
			colour = spy_hmap_count(&palette);
			spy_hmap_add(&palette, rgb, colour);
			spy_buf_addf(&pal, "%s\"#%06" PRIx32 "\"", colour ? (colour % 8 ? "," : ",\n") : "", rgb);
		}
		spy_buf_addf(&ft, "%s%" PRIu32 ",%" PRId64 ",%" PRIu32 ",%d,%" PRIu64,
			     i ? (i % 8 ? "," : ",\n") : "", func, file, fr->line, (int)cls, colour);
	}
	spy_hmap_release(&palette);
	spy_buf_adds(&g->out, "var S=[");
	for (size_t i = 0; i < g->nstrs; i++) {
		if (i) {
			spy_buf_adds(&g->out, i % 8 ? "," : ",\n");
		}
		js_escape(&g->out, g->strv[i]);
		flush(g, false);
	}
	spy_buf_adds(&g->out, "];\nvar P=[");
	spy_buf_add(&g->out, pal.buf, pal.len);
	spy_buf_adds(&g->out, "];\nvar F=[");
	spy_buf_add(&g->out, ft.buf, ft.len);
	spy_buf_adds(&g->out, "];\nvar X=[");
	if (g->style && g->style->frame_style) {
		spy_buf_add(&g->out, notes.buf, notes.len);
	}
	spy_buf_adds(&g->out, "];\nvar Q=[");
	spy_buf_add(&g->out, src.buf, src.len);
	spy_buf_adds(&g->out, "];\nvar N=[");
	flush(g, false);
	spy_buf_add(&g->out, g->nodes.buf, g->nodes.len);
	spy_buf_adds(&g->out, "];\n");
	spy_buf_release(&ft);
	spy_buf_release(&pal);
	spy_buf_release(&notes);
	spy_buf_release(&src);
}

/* ---- the fixed parts ----------------------------------------------------- */

static const char svg_css[] =
	"text{font-family:Verdana,'DejaVu Sans',sans-serif;font-size:12px;fill:#000}\n"
	"#title{font-size:17px;font-weight:bold}\n"
	".meta{font-size:12px;fill:#333}\n"
	".btn{cursor:pointer;fill:#1a55b0;text-decoration:underline}\n"
	".btn:hover{fill:#c02020}\n"
	"#frames path{cursor:pointer}\n"
	"#hl{fill:none;stroke:#000;stroke-width:1;pointer-events:none}\n"
	"#frames text{pointer-events:none;font-size:11px}\n"
	"#tip{pointer-events:none}\n"
	"#tip rect{fill:#fffff0;stroke:#888}\n"
	"#status{font-size:12px;fill:#333}\n"
	"#matched{fill:#b000b0}\n";

/*
 * The script. It reads W, PAD, FH, Y0, MAXD, INV, HEIGHT and the S
 * (strings), P (colours), F (frames: func, file, line, class, colour in P),
 * X (per frame, the caller's extra tooltip line in S or -1; empty unless a
 * style was given), Q (per frame, its source line's kept text in S or -1)
 * and N (nodes:
 * depth, frame, total, self) tables written before it. Nothing here contains
 * a target string; those live only in S, escaped by js_escape, and reach the
 * page only through textContent, never parsed as markup.
 *
 * Frames are drawn as one <path> per colour rather than one element each:
 * tens of thousands of elements take a browser about a second to build,
 * while path data parses in a few milliseconds. Hover and click find the
 * frame under the pointer from its position instead (rows[d]: the frames
 * drawn at depth d, in x order, binary-searched); a single outline rect
 * (#hl) marks the hovered frame. Labels are <text> elements, only for
 * frames wide enough to hold a few characters.
 *
 * Search counts matched samples once: nodes are in depth-first order, so a
 * match's subtree is [i, end[i]), and matches inside it are skipped.
 */
static const char svg_js[] =
	"var n=N.length/4,dep=new Int32Array(n),fr=new Int32Array(n),tot=new Float64Array(n),\n"
	" slf=new Float64Array(n),x0=new Float64Array(n),par=new Int32Array(n),end=new Int32Array(n),\n"
	" cur=new Float64Array(n),hit=new Uint8Array(n),st=[],i,j;\n"
	"for(i=0;i<n;i++){dep[i]=N[4*i];fr[i]=N[4*i+1];tot[i]=N[4*i+2];slf[i]=N[4*i+3];\n"
	" while(st.length>dep[i]){end[st.pop()]=i;}\n"
	" if(st.length){j=st[st.length-1];par[i]=j;x0[i]=cur[j];cur[j]+=tot[i];}else{par[i]=-1;x0[i]=0;}\n"
	" cur[i]=x0[i];st.push(i);}\n"
	"while(st.length){end[st.pop()]=n;}\n"
	"var TOTAL=n?tot[0]:0,zoom=0,term=null,NS='http://www.w3.org/2000/svg',rows=[],rx=[],rw=[];\n"
	"var $=function(id){return document.getElementById(id);};\n"
	"var nojs=document.getElementById('nojs');if(nojs){nojs.parentNode.removeChild(nojs);}\n"
	"var root=document.documentElement,layer=$('frames'),tip=$('tip'),tipbox=$('tipbox'),hl=$('hl'),status=$('status');\n"
	"function func(i){var f=fr[i];if(f===-1){return 'all';}\n"
	" if(f===-2){return '['+slf[i]+' narrow frame'+(slf[i]===1?'':'s')+' merged]';}return S[F[5*f]];}\n"
	"function where(i){var f=fr[i];if(f<0){return '';}var fi=F[5*f+1],l=F[5*f+2];\n"
	" if(fi<0){return '';}return S[fi]+(l?':'+l:'');}\n"
	"function full(i){var w=where(i);return w?func(i)+' ('+w+')':func(i);}\n"
	/* py-spy's label: the file's base name and the line tell apart boxes of one function. */
	"function label(i){var w=where(i);return w?func(i)+' ('+w.slice(w.lastIndexOf('/')+1)+')':func(i);}\n"
	"function pct(a,b){return b?(100*a/b).toFixed(2)+'%':'-';}\n"
	"function num(x){return String(x).replace(/\\B(?=(\\d{3})+(?!\\d))/g,',');}\n"
	"function colour(i){var f=fr[i];if(f===-1){return '#d0d0d0';}if(f===-2){return '#b8b8b8';}\n"
	" return P[F[5*f+4]];}\n"
	"function ypos(d){return INV?Y0+d*FH:Y0+(MAXD-d)*FH;}\n"
	"function el(tag,attrs){var e=document.createElementNS(NS,tag);\n"
	" for(var k in attrs){e.setAttribute(k,attrs[k]);}return e;}\n"
	"function draw(){var paths={},keys=[],lab=document.createDocumentFragment(),a,W2=W-2*PAD,k;\n"
	" rows=[];rx=[];rw=[];\n"
	" if(!n){return;}\n"
	" function add(i,x,w,grey){var c=hit[i]?'#e020e0':grey?'#e4e4e4':colour(i),d=dep[i],y=ypos(d),\n"
	"  ww=(w>=3?w-0.6:Math.max(w,0.3)).toFixed(1),p=paths[c];\n"
	"  if(!p){p=paths[c]=[];keys.push(c);}\n"
	"  p.push('M'+x.toFixed(1)+' '+y+'h'+ww+'v'+(FH-1)+'h-'+ww+'z');\n"
	"  if(!rows[d]){rows[d]=[];rx[d]=[];rw[d]=[];}rows[d].push(i);rx[d].push(x);rw[d].push(w);\n"
	"  if(w>=24){var s=label(i),m=Math.floor((w-6)/6.6);\n"
	"   if(s.length>m){s=m>2?s.slice(0,m-2)+'..':'';}\n"
	"   if(s){var t=el('text',{x:(x+3).toFixed(1),y:y+FH-4});t.textContent=s;\n"
	"    if(grey){t.setAttribute('fill','#777');}lab.appendChild(t);}}}\n"
	" for(a=par[zoom];a>=0;a=par[a]){add(a,PAD,W2,true);}\n"
	" var zx=x0[zoom],sc=W2/(tot[zoom]||1);\n"
	" for(i=zoom;i<end[zoom];i++){var w=tot[i]*sc;if(w>=0.25){add(i,PAD+(x0[i]-zx)*sc,w,false);}}\n"
	" var frag=document.createDocumentFragment();keys.sort();\n"
	" for(k=0;k<keys.length;k++){frag.appendChild(el('path',{d:paths[keys[k]].join(''),fill:keys[k]}));}\n"
	" frag.appendChild(lab);\n"
	" while(layer.firstChild){layer.removeChild(layer.firstChild);}layer.appendChild(frag);\n"
	" $('reset').setAttribute('opacity',zoom?1:0.35);}\n"
	"function pos(ev){var box=root.getBoundingClientRect(),s=W/(box.width||W);\n"
	" return [(ev.clientX-box.left)*s,(ev.clientY-box.top)*s];}\n"
	"function at(p){if(p[1]<Y0+(window.pageYOffset||0)){return -1;}var r=Math.floor((p[1]-Y0)/FH),d=INV?r:MAXD-r;\n"
	" if(d<0||d>MAXD||!rows[d]){return -1;}\n"
	" var xs=rx[d],lo=0,hi=xs.length-1,k=-1,m;\n"
	" while(lo<=hi){m=(lo+hi)>>1;if(xs[m]<=p[0]){k=m;lo=m+1;}else{hi=m-1;}}\n"
	" if(k<0||p[0]>xs[k]+Math.max(rw[d][k],1)){return -1;}return rows[d][k];}\n"
	"function lines(i){var f=fr[i],L=[];\n"
	" L.push(full(i));\n"
	" L.push(num(tot[i])+' samples, '+pct(tot[i],TOTAL)+' of total'+(zoom?', '+pct(tot[i],tot[zoom])+' of zoomed':''));\n"
	" if(f===-2){L.push('frames each under one pixel, summed');}\n"
	" else{L.push('self: '+num(slf[i])+' samples, '+pct(slf[i],TOTAL)+' of total');}\n"
	" if(f>=0&&Q[f]>=0){L.push('\\u203a '+S[Q[f]].replace(/^ +/,''));}\n"
	" if(f>=0){L.push(['Python','native','synthetic','idle / waiting'][F[5*f+3]]+' frame');}\n"
	" if(f>=0&&X[f]>=0){L.push(S[X[f]]);}\n"
	" return L;}\n"
	"function show(i,p){var L=lines(i),ts=tip.getElementsByTagName('text'),k,w=0,d=dep[i],idx,x,wd;\n"
	" status.textContent=L[0]+' \\u2014 '+L[1];\n"
	" for(k=0;k<ts.length;k++){var s=k<L.length?L[k]:'';if(s.length>160){s=s.slice(0,158)+'..';}\n"
	"  ts[k].textContent=s;if(s){w=Math.max(w,ts[k].getComputedTextLength());}}\n"
	" var h=L.length*15+8;\n"
	" w=Math.min(w+12,W-4);tipbox.setAttribute('width',w);tipbox.setAttribute('height',h);\n"
	" var tx=p[0]+14,ty=p[1]+16;if(tx+w>W-2){tx=Math.max(2,p[0]-w-8);}\n"
	" if(ty+h>HEIGHT-2){ty=Math.max(2,p[1]-h-8);}\n"
	" tip.setAttribute('transform','translate('+tx.toFixed(1)+','+ty.toFixed(1)+')');\n"
	" tip.setAttribute('visibility','visible');\n"
	" idx=rows[d].indexOf(i);x=rx[d][idx];wd=Math.max(rw[d][idx],1);\n"
	" hl.setAttribute('x',x.toFixed(1));hl.setAttribute('y',ypos(d));hl.setAttribute('width',wd.toFixed(1));\n"
	" hl.setAttribute('visibility','visible');}\n"
	"function hide(){tip.setAttribute('visibility','hidden');hl.setAttribute('visibility','hidden');status.textContent=' ';}\n"
	"root.addEventListener('mousemove',function(e){var k=at(pos(e));if(k<0){hide();}else{show(k,pos(e));}});\n"
	"root.addEventListener('mouseleave',hide);\n"
	"layer.addEventListener('click',function(e){var k=at(pos(e));\n"
	" if(k>=0&&fr[k]!==-2){zoom=k;draw();hide();}});\n"
	"function unzoom(){if(zoom){zoom=0;draw();hide();}}\n"
	"function search(){var s=window.prompt('Search frames (regular expression, or substring if invalid):',term||'');\n"
	" if(s===null){return;}if(s===''){clear();return;}\n"
	" var re=null;try{re=new RegExp(s);}catch(e){re=null;}\n"
	" var sum=0,skip=0;term=s;\n"
	" for(i=0;i<n;i++){var m=false;if(fr[i]>=0){var t=full(i);m=re?re.test(t):t.indexOf(s)>=0;}\n"
	"  hit[i]=m?1:0;if(m&&i>=skip){sum+=tot[i];skip=end[i];}}\n"
	" $('matched').textContent='Matched: '+pct(sum,TOTAL)+' ('+num(sum)+' of '+num(TOTAL)+' samples)';\n"
	" $('clear').setAttribute('visibility','visible');draw();}\n"
	"function clear(){term=null;hit.fill(0);$('matched').textContent='';\n"
	" $('clear').setAttribute('visibility','hidden');draw();}\n"
	"$('reset').addEventListener('click',unzoom);\n"
	"$('search').addEventListener('click',search);\n"
	"$('clear').addEventListener('click',clear);\n"
	"document.addEventListener('keydown',function(e){\n"
	" if((e.ctrlKey||e.metaKey)&&(e.key==='f'||e.key==='F')){e.preventDefault();search();}\n"
	" else if(e.key==='Escape'){if(zoom){unzoom();}else if(term!==null){clear();}}});\n"
	"draw();\n"
	/* The root at the bottom of the first screen: a deep graph opens on its widest frames. */
	/* Drawn over the frames it passes (after them in the document), under the tooltip. */
	"var head=$('head');head.parentNode.insertBefore(head,tip);\n"
	"function follow(){var y=window.pageYOffset||0;head.setAttribute('transform',y?'translate(0,'+y+')':'');}\n"
	"window.addEventListener('scroll',follow);\n"
	"if(!INV&&window.innerHeight&&HEIGHT>window.innerHeight){window.scrollTo(0,HEIGHT-window.innerHeight);}\n"
	"follow();\n";

/* One "key value" item of the header, skipped when the key is unset. */
static bool meta_item(struct svg *g, bool first, const char *label, const char *key, const char *unit)
{
	const char *v = fg_profile_meta_get(g->p, key);
	if (!v || !*v) {
		return first;
	}
	if (!first) {
		spy_buf_adds(&g->out, " | ");
	}
	spy_buf_adds(&g->out, label);
	xml_escape(&g->out, v);
	spy_buf_adds(&g->out, unit);
	return false;
}

/* The resource readings' totals (record --slice, -f chrome): CPU over the recording, peak RSS. */
static void emit_resources(struct svg *g)
{
	struct fg_resources *r = NULL;
	struct spy_err ignored = SPY_ERR_INIT;
	if (fg_resources_load(&r, g->p, "profile", &ignored) < 0 || !r) {
		return;
	}
	struct fg_res_point tot;
	fg_resources_totals(r, &tot);
	if (tot.user_ns != FG_RES_UNKNOWN && tot.sys_ns != FG_RES_UNKNOWN) {
		spy_buf_addf(&g->out, " | CPU user %.2f s, sys %.2f s", (double)tot.user_ns / 1e9,
			     (double)tot.sys_ns / 1e9);
	}
	if (tot.rss != FG_RES_UNKNOWN) {
		spy_buf_addf(&g->out, " | peak RSS %.1f MB", (double)tot.rss / 1e6);
	}
	fg_resources_free(r);
}

/* The errors in words, and launch mode's start-up folded by record (FG_META_STARTUP). */
static void emit_errors(struct svg *g, bool first)
{
	struct spy_buf words = SPY_BUF_INIT;
	fg_errors_words(g->p, &words);
	if (words.len) {
		spy_buf_adds(&g->out, first ? "errors: " : " | errors: ");
		xml_escape(&g->out, words.buf);
	}
	spy_buf_release(&words);
	unsigned long long n = 0, cut = 0;
	const char *v = fg_profile_meta_get(g->p, FG_META_STARTUP);
	if (v && sscanf(v, "%llu %llu", &n, &cut) == 2 && n) {
			spy_buf_addf(&g->out, " | start-up: %llu sample%s, folded", n, n == 1 ? "" : "s");
	}
}

static void emit_header(struct svg *g, const char *title, int height)
{
	struct spy_buf *o = &g->out;
	const char *cmd = fg_profile_meta_get(g->p, FG_META_COMMAND);
	/* The header follows the view down (the script moves it), so the controls stay at hand. */
	spy_buf_addf(o, "<g id=\"head\"><rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fbfbf6\"/>\n",
		     FG_SVG_WIDTH, FG_SVG_TOP - 8);
	spy_buf_addf(o, "<text id=\"title\" x=\"%d\" y=\"24\">", FG_SVG_PAD);
	xml_escape(o, title);
	spy_buf_adds(o, "</text>\n");
	spy_buf_addf(o, "<text class=\"meta\" x=\"%d\" y=\"44\">command: ", FG_SVG_PAD);
	if (cmd && *cmd) {
		/* A long command line is clipped by the drawing; the tooltip has it all. */
		spy_buf_adds(o, "<title>");
		xml_escape(o, cmd);
		spy_buf_adds(o, "</title>");
		xml_escape(o, cmd);
	} else {
		spy_buf_adds(o, "-");
	}
	spy_buf_adds(o, "</text>\n");
	spy_buf_addf(o, "<text class=\"meta\" x=\"%d\" y=\"62\">", FG_SVG_PAD);
	/* Separators are ASCII: the whole file is ASCII. */
	bool first = true;
	first = meta_item(g, first, "Python ", FG_META_PYTHON, "");
	first = meta_item(g, first, "duration ", FG_META_DURATION_S, " s");
	if (!first) {
		spy_buf_adds(o, " | ");
	}
	spy_buf_addf(o, "%" PRIu64 " samples", g->t.nodes[0].total);
	/* A recording that dropped samples says so: "samples:" counts them all. */
	const char *recorded = fg_profile_meta_get(g->p, FG_META_SAMPLES);
	char drawn[32];
	snprintf(drawn, sizeof(drawn), "%" PRIu64, g->t.nodes[0].total);
	if (recorded && *recorded && strcmp(recorded, drawn)) {
		spy_buf_adds(o, " (");
		xml_escape(o, recorded);
		spy_buf_adds(o, " recorded)");
	}
	first = false;
	first = meta_item(g, first, "rate ", FG_META_RATE_HZ, " Hz");
	emit_errors(g, first);
	emit_resources(g);
	first = meta_item(g, first, "pid ", FG_META_PID, "");
	(void)meta_item(g, first, "spy ", FG_META_SPY_VERSION, "");
	spy_buf_adds(o, "</text>\n");

	/* Controls and the legend. */
	spy_buf_addf(o,
		     "<text id=\"reset\" class=\"btn\" x=\"%d\" y=\"86\">Reset zoom</text>\n"
		     "<text id=\"search\" class=\"btn\" x=\"%d\" y=\"86\">Search (Ctrl-F)</text>\n"
		     "<text id=\"clear\" class=\"btn\" x=\"%d\" y=\"86\" visibility=\"hidden\">Clear</text>\n"
		     "<text id=\"matched\" x=\"%d\" y=\"86\"></text>\n",
		     FG_SVG_PAD, FG_SVG_PAD + 90, FG_SVG_PAD + 210, FG_SVG_PAD + 260);
	static const struct fg_svg_legend kinds[] = {
		{ "Python", 0xe8743b },
		{ "native", 0x5fa8c8 },
		{ "idle / waiting", 0xbdb3cc },
		{ "process / thread", 0xc7c7c7 },
	};
	const struct fg_svg_legend *legend = kinds;
	size_t nlegend = SPY_ARRAY_SIZE(kinds);
	if (g->style && g->style->legend) {
		legend = g->style->legend;
		nlegend = g->style->nlegend;
	}
	int x = FG_SVG_WIDTH - 470;
	for (size_t i = 0; i < nlegend; i++) {
		spy_buf_addf(o,
			     "<rect x=\"%d\" y=\"76\" width=\"12\" height=\"12\" fill=\"#%06" PRIx32 "\"/>"
			     "<text class=\"meta\" x=\"%d\" y=\"86\">",
			     x, legend[i].rgb & 0xffffff, x + 16);
		xml_escape(o, legend[i].label);
		spy_buf_adds(o, "</text>\n");
		x += 20 + 7 * (int)strlen(legend[i].label) + 16;
	}
	spy_buf_adds(o, "</g>\n");
	spy_buf_addf(o, "<text id=\"status\" x=\"%d\" y=\"%d\"> </text>\n", FG_SVG_PAD, height - 12);
}

/* ---- entry --------------------------------------------------------------- */

int fg_profile_write_svg(const struct fg_profile *p, FILE *f, const struct fg_svg_opts *opts,
			 struct spy_err *err)
{
	return fg_profile_write_svg_styled(p, f, opts, NULL, err);
}

int fg_profile_write_svg_styled(const struct fg_profile *p, FILE *f, const struct fg_svg_opts *opts,
				const struct fg_svg_style *style, struct spy_err *err)
{
	struct svg g;
	memset(&g, 0, sizeof(g));
	g.f = f;
	g.p = p;
	g.inverted = opts && opts->inverted;
	g.style = style;
	spy_buf_init(&g.out);
	spy_buf_init(&g.note);
	spy_buf_init(&g.nodes);
	const char *title = opts && opts->title ? opts->title : "spy flame graph";

	fg_tree_init(&g.t, p);
	size_t nf = fg_profile_frame_count(p);
	g.fmap = spy_xmalloc((nf ? nf : 1) * sizeof(*g.fmap));
	memset(g.fmap, 0xff, (nf ? nf : 1) * sizeof(*g.fmap));
	g.frames = spy_xmalloc((nf ? nf : 1) * sizeof(*g.frames));

	/* One pixel of the full-width graph, in samples, rounded up. */
	uint64_t total = g.t.nodes[0].total;
	uint64_t width = FG_SVG_WIDTH - 2 * FG_SVG_PAD;
	uint64_t min = total / width + (total % width ? 1 : 0);
	if (!min) {
		min = 1;
	}
	emit_nodes(&g, min);

	int height = FG_SVG_TOP + (int)(g.maxdepth + 1) * FG_SVG_FRAME_H + FG_SVG_BOTTOM;
	struct spy_buf *o = &g.out;
	spy_buf_addf(o,
		     "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
		     "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
		     "xmlns=\"http://www.w3.org/2000/svg\">\n",
		     FG_SVG_WIDTH, height, FG_SVG_WIDTH, height);
	spy_buf_adds(o, "<title>");
	xml_escape(o, title);
	spy_buf_adds(o, "</title>\n<style type=\"text/css\"><![CDATA[\n");
	spy_buf_adds(o, svg_css);
	spy_buf_adds(o, "]]></style>\n");
	spy_buf_addf(o, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fbfbf6\"/>\n",
		     FG_SVG_WIDTH, height);
	emit_header(&g, title, height);
	/* Shown where scripts do not run (an <img>); the script removes it. */
	spy_buf_addf(o, "<text id=\"nojs\" class=\"meta\" x=\"%d\" y=\"%d\">The frames are drawn by "
		     "the file's script: open the file itself in a browser.</text>\n",
		     FG_SVG_PAD, FG_SVG_TOP + 16);
	spy_buf_adds(o, "<g id=\"frames\"></g>\n");
	spy_buf_addf(o, "<rect id=\"hl\" x=\"0\" y=\"0\" width=\"1\" height=\"%d\" visibility=\"hidden\"/>\n",
		     FG_SVG_FRAME_H - 1);
	spy_buf_adds(o, "<g id=\"tip\" visibility=\"hidden\"><rect id=\"tipbox\" x=\"0\" y=\"0\" "
		     "width=\"10\" height=\"10\" rx=\"3\"/>");
	/* Tooltip lines: name, samples, self, source, kind, the caller's note. */
	for (int i = 0; i < 6; i++) {
		spy_buf_addf(o, "<text x=\"6\" y=\"%d\"></text>", 16 + 15 * i);
	}
	spy_buf_adds(o, "</g>\n");
	spy_buf_adds(o, "<script type=\"text/ecmascript\"><![CDATA[\n\"use strict\";\n(function(){\n");
	spy_buf_addf(o, "var W=%d,PAD=%d,FH=%d,Y0=%d,MAXD=%" PRIu32 ",INV=%d,HEIGHT=%d;\n",
		     FG_SVG_WIDTH, FG_SVG_PAD, FG_SVG_FRAME_H, FG_SVG_TOP, g.maxdepth,
		     g.inverted ? 1 : 0, height);
	flush(&g, false);
	emit_tables(&g);
	flush(&g, false);
	spy_buf_adds(o, svg_js);
	spy_buf_adds(o, "})();\n]]></script>\n</svg>\n");
	flush(&g, true);

	int rc = 0;
	if (!g.io_errno && fflush(f)) {
		g.io_errno = errno ? errno : EIO;
	}
	if (!g.io_errno && ferror(f)) {
		g.io_errno = EIO;
	}
	if (g.io_errno) {
		rc = spy_err_set(err, SPY_EIO, "writing the SVG flame graph: %s", strerror(g.io_errno));
	}
	spy_buf_release(&g.out);
	spy_buf_release(&g.nodes);
	spy_buf_release(&g.note);
	spy_strtab_release(&g.notes);
	free(g.fmap);
	free(g.frames);
	spy_hmap_release(&g.strs);
	free(g.strv);
	fg_tree_release(&g.t);
	return rc;
}
