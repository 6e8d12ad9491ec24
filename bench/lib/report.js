'use strict';
// Rendering of a results object: plain-text table (stdout), Markdown (README)
// and a hand-written SVG bar chart.

const GROUPS = [
  ['reference', 'Reference'],
  ['issue', 'Token issuance (POST /oauth/token)'],
  ['protected', 'Protected route (GET with a Bearer token)'],
];

const MiB = 1024 * 1024;

// ------------------------------------------------------------- formatting
function num(x, { digits } = {}) {
  if (x == null || !Number.isFinite(x)) return 'n/a';
  if (digits === undefined) digits = Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 10 ? 1 : 2;
  return x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function ms(x) {
  if (x == null || !Number.isFinite(x)) return 'n/a';
  if (x >= 100) return x.toFixed(0);
  if (x >= 10) return x.toFixed(1);
  if (x >= 1) return x.toFixed(2);
  return x.toFixed(3);
}

function withRange(s, f) {
  if (!s || s.median == null) return 'n/a';
  return `${f(s.median)} (${f(s.min)}–${f(s.max)})`;
}

function ratio(x) {
  return x == null ? 'n/a' : `${x >= 10 ? x.toFixed(1) : x >= 0.1 ? x.toFixed(2) : x.toFixed(3)}×`;
}

function checkValue(c) {
  if (c.measured == null) return 'n/a';
  if (c.unit === 'x') return ratio(c.measured);
  if (c.unit === 'ms') return `${c.measured >= 0 ? '+' : ''}${c.measured.toFixed(3)} ms`;
  if (c.unit === 'MiB') return `${c.measured >= 0 ? '+' : ''}${c.measured.toFixed(1)} MiB`;
  return String(c.measured);
}

function checkRequired(c) {
  const op = c.op === '>=' ? '≥' : '≤';
  if (c.unit === 'x') return `${op} ${c.threshold}×`;
  return `${op} ${c.op === '<=' ? '+' : ''}${c.threshold} ${c.unit}`;
}

function verdict(c) {
  return c.pass == null ? 'n/a' : c.pass ? 'PASS' : 'FAIL';
}

function pad(s, n, right = false) {
  s = String(s);
  if (s.length >= n) return s;
  return right ? s.padStart(n) : s.padEnd(n);
}

function targetsOf(results, group) {
  return results.targets.filter((t) => t.group === group);
}

function settingsLines(r) {
  const s = r.settings;
  return [
    `${r.date.slice(0, 19).replace('T', ' ')} UTC · ${r.machine.cpuModel.trim()} · ${r.machine.cores} cores · Node ${r.machine.node}${s.quick ? ' · QUICK smoke run' : ''}`,
    `${s.rounds} rounds × ${s.duration} s per target and connection count, ${s.warmup} s warm-up, round-robin; client auth ${s.clientAuth === 'basic' ? 'client_secret_basic' : 'client_secret_post'}`,
    `${r.machine.pinned ? `servers pinned to CPU ${s.serverCpu}, load generator (autocannon) to CPU ${s.loadCpu}` : 'unpinned'}` +
      `${s.spinning ? '; idle cores kept busy (SCHED_IDLE)' : ''}`,
  ];
}

function settingsLine(r) {
  return settingsLines(r).join(' · ');
}

// ------------------------------------------------------------------- text
function text(r) {
  const out = [];
  const conns = r.settings.connections;
  out.push(settingsLine(r));
  out.push('Medians over rounds (min–max). × Express = req/s relative to the bare Express 5 constant-JSON route at the same connection count.');
  for (const [group, title] of GROUPS) {
    const ts = targetsOf(r, group);
    if (!ts.length) continue;
    for (const c of conns) {
      out.push('');
      const head = `${title} — ${c} connection${c === 1 ? '' : 's'}`;
      out.push(head);
      out.push(`${pad('target', 58)}${pad('req/s', 28)}${pad('p50 ms', 24)}${pad('p99 ms', 24)}× Express`);
      for (const t of ts) {
        const m = r.medians[t.id][c];
        out.push(
          `${pad((t.ours ? '* ' : '  ') + t.label, 58)}${pad(withRange(m.rps, (x) => num(x)), 28)}${pad(withRange(m.p50, ms), 24)}${pad(withRange(m.p99, ms), 24)}${ratio(m.ratioToExpress)}`,
        );
      }
    }
  }
  if (r.memory) {
    out.push('');
    out.push(`Memory — ${r.memory.requests.toLocaleString('en-US')} requests over ${r.memory.tokens.toLocaleString('en-US')} distinct tokens (${r.memory.algorithm}, ${r.memory.connections} connections)`);
    for (const [id, run] of Object.entries(r.memory.runs)) {
      out.push(
        `  ${pad(id, 16)} route ${pad(run.route, 12)} peak RSS ${pad(mib(run.peakRss), 12)} (idle ${mib(run.idleRss)}, heap after full GC ${mib(run.afterFullGc && run.afterFullGc.heapUsed)})  ${run.ok.toLocaleString('en-US')} × 2xx, ${run.non2xx} non-2xx, ${num(run.rps)} req/s`,
      );
    }
    out.push(`  difference: ${r.memory.deltaMiB == null ? 'n/a' : `${r.memory.deltaMiB.toFixed(1)} MiB`}`);
  }
  out.push('');
  out.push('Targets');
  for (const c of r.checks) {
    out.push(`  ${pad(verdict(c), 5)} ${pad(c.label, 78)} ${pad(checkValue(c), 12, true)}  (required ${checkRequired(c)})`);
  }
  if (r.notes && r.notes.length) {
    out.push('');
    out.push('Notes');
    for (const n of r.notes) out.push(`  - ${n}`);
  }
  if (r.warnings.length) {
    out.push('');
    out.push('Warnings');
    for (const w of r.warnings) out.push(`  - ${w}`);
  }
  return out.join('\n');
}

function mib(b) {
  return b == null ? 'n/a' : `${(b / MiB).toFixed(1)} MiB`;
}

// --------------------------------------------------------------- markdown
function md(s) {
  return String(s).replace(/\|/g, '\\|');
}

function markdown(r) {
  const conns = r.settings.connections;
  const out = [];
  out.push('<!-- generated by bench/run.js (npm run bench) -->');
  out.push(`_${md(settingsLine(r))}._`);
  out.push('');
  out.push('Medians over the rounds, min–max in parentheses. Latencies in ms. **× Express** is throughput relative to a bare Express 5 route answering constant JSON, measured in the same run.');
  for (const [group, title] of GROUPS) {
    const ts = targetsOf(r, group);
    if (!ts.length) continue;
    out.push('');
    out.push(`#### ${title}`);
    out.push('');
    const head = ['Target'];
    const align = [':--'];
    for (const c of conns) {
      const cl = `${c} conn`;
      head.push(`req/s (${cl})`, `p50 (${cl})`, `p99 (${cl})`, `× Express (${cl})`);
      align.push('--:', '--:', '--:', '--:');
    }
    out.push(`| ${head.join(' | ')} |`);
    out.push(`| ${align.join(' | ')} |`);
    for (const t of ts) {
      const cells = [t.ours ? `**${md(t.label)}**` : md(t.label)];
      for (const c of conns) {
        const m = r.medians[t.id][c];
        cells.push(withRange(m.rps, (x) => num(x)), withRange(m.p50, ms), withRange(m.p99, ms), ratio(m.ratioToExpress));
      }
      out.push(`| ${cells.join(' | ')} |`);
    }
  }
  if (r.memory) {
    out.push('');
    out.push(`#### Memory: ${r.memory.requests.toLocaleString('en-US')} protected requests over ${r.memory.tokens.toLocaleString('en-US')} distinct tokens`);
    out.push('');
    out.push('| Server | Route | Peak RSS (VmHWM) | Idle RSS | Heap after full GC | 2xx | req/s |');
    out.push('| :-- | :-- | --: | --: | --: | --: | --: |');
    for (const [id, run] of Object.entries(r.memory.runs)) {
      out.push(
        `| ${id === 'ours-protected' ? `**requireBearer() (${r.memory.algorithm})**` : 'same app, no auth'} | \`${run.route}\` | ${mib(run.peakRss)} | ${mib(run.idleRss)} | ${mib(run.afterFullGc && run.afterFullGc.heapUsed)} | ${run.ok.toLocaleString('en-US')} | ${num(run.rps)} |`,
      );
    }
  }
  out.push('');
  out.push('#### Targets');
  out.push('');
  out.push('| Target | Measured | Required | Result |');
  out.push('| :-- | --: | --: | :-: |');
  for (const c of r.checks) {
    out.push(`| ${md(c.label)} | ${checkValue(c)} | ${checkRequired(c)} | ${c.pass == null ? 'n/a' : c.pass ? '✅ pass' : '❌ fail'} |`);
  }
  const notes = [...(r.notes || []), ...r.warnings.map((w) => `Warning: ${w}`)];
  if (notes.length) {
    out.push('');
    for (const n of notes) out.push(`- ${md(n)}`);
  }
  out.push('');
  return out.join('\n');
}

// -------------------------------------------------------------------- svg
function esc(s) {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function colorOf(t) {
  if (t.ours) return '#2563eb';
  if (t.group === 'reference') return '#6b7280';
  if (t.id.startsWith('floor-')) return '#9ca3af';
  if (t.id === 'ours-open') return '#93c5fd';
  return '#f59e0b';
}

function svg(r) {
  const conns = r.settings.connections;
  const hi = Math.max(...conns);
  const lo = Math.min(...conns);
  const W = 1000;
  const labelW = 390;
  const barX = labelW + 10;
  const barW = 430;
  const rowH = conns.length > 1 ? 26 : 18;
  const parts = [];
  let y = 0;

  const line = (s) => parts.push(s);
  y += 28;
  line(`<text x="16" y="${y}" class="title">express-client-credentials — throughput relative to bare Express 5</text>`);
  for (const l of settingsLines(r)) {
    y += 16;
    line(`<text x="16" y="${y}" class="sub">${esc(l)}</text>`);
  }
  y += 22;
  // legend
  line(`<rect x="16" y="${y - 10}" width="14" height="10" fill="#374151"/><text x="34" y="${y}" class="sub">${hi} connections</text>`);
  if (conns.length > 1) line(`<rect x="150" y="${y - 10}" width="14" height="10" fill="#374151" fill-opacity="0.4"/><text x="168" y="${y}" class="sub">${lo} connection${lo === 1 ? '' : 's'}</text>`);
  line(`<rect x="290" y="${y - 10}" width="14" height="10" fill="#2563eb"/><text x="308" y="${y}" class="sub">OURS</text>`);
  line(`<rect x="360" y="${y - 10}" width="14" height="10" fill="#9ca3af"/><text x="378" y="${y}" class="sub">jsonwebtoken floor</text>`);
  line(`<rect x="500" y="${y - 10}" width="14" height="10" fill="#f59e0b"/><text x="518" y="${y}" class="sub">peer stacks</text>`);
  line(`<rect x="610" y="${y - 10}" width="14" height="10" fill="#6b7280"/><text x="628" y="${y}" class="sub">bare Express / node:http</text>`);
  y += 12;

  // Scale on everything but bare node:http, whose bar is clipped when it
  // would squash the rest.
  const all = [];
  for (const t of r.targets) if (t.id !== 'node-http-const') for (const c of conns) all.push(r.medians[t.id][c].ratioToExpress || 0);
  const maxRatio = Math.max(1.1, ...all) * 1.15;
  const sx = (v) => (Math.min(maxRatio, Math.max(0, v)) / maxRatio) * barW;
  const panelTop = y;
  const oneLineAt = parts.length; // the 1.0x line goes here, under the bars

  for (const [group, title] of GROUPS) {
    const ts = targetsOf(r, group);
    if (!ts.length) continue;
    y += 22;
    line(`<text x="16" y="${y}" class="group">${esc(title)}</text>`);
    y += 6;
    for (const t of ts) {
      const top = y;
      line(`<text x="${labelW}" y="${top + 13}" class="label" text-anchor="end">${esc(t.label)}</text>`);
      conns.forEach((c, i) => {
        const v = r.medians[t.id][c].ratioToExpress;
        const h = conns.length > 1 ? 10 : 12;
        const by = top + 3 + i * (h + 1);
        const color = colorOf(t);
        const clipped = (v || 0) > maxRatio;
        line(`<rect x="${barX}" y="${by}" width="${sx(v || 0).toFixed(1)}" height="${h}" fill="${color}"${i > 0 ? ' fill-opacity="0.4"' : ''}/>`);
        const tail = clipped ? ' (bar cut)' : '';
        line(`<text x="${(barX + sx(v || 0) + 4).toFixed(1)}" y="${by + h - 1}" class="val">${esc(ratio(v))}${c === hi ? ` · ${esc(num(r.medians[t.id][c].rps.median))} req/s` : ''}${tail}</text>`);
      });
      y += rowH;
    }
  }
  const oneX = barX + sx(1);
  parts.splice(oneLineAt, 0, `<line x1="${oneX.toFixed(1)}" y1="${panelTop + 8}" x2="${oneX.toFixed(1)}" y2="${y + 4}" stroke="#9ca3af" stroke-dasharray="3 3" stroke-width="1"/>`);
  line(`<text x="${oneX.toFixed(1)}" y="${y + 16}" class="val" text-anchor="middle">1.0× bare Express</text>`);
  y += 30;

  // Targets panel.
  line(`<text x="16" y="${y}" class="title">Targets</text>`);
  y += 8;
  for (const c of r.checks) {
    const top = y + 6;
    const m = c.measured;
    const scaleMax = Math.max(Math.abs(m || 0), c.threshold) * 1.25 || 1;
    const sc = (v) => (Math.max(0, v) / scaleMax) * (barW - 60);
    const color = c.pass == null ? '#9ca3af' : c.pass ? '#16a34a' : '#dc2626';
    line(`<text x="${labelW}" y="${top + 13}" class="label" text-anchor="end">${esc(c.short || c.label)}</text>`);
    line(`<rect x="${barX}" y="${top + 3}" width="${sc(m || 0).toFixed(1)}" height="12" fill="${color}"/>`);
    const tx = barX + sc(c.threshold);
    line(`<line x1="${tx.toFixed(1)}" y1="${top}" x2="${tx.toFixed(1)}" y2="${top + 18}" stroke="#111827" stroke-width="2"/>`);
    line(`<text x="${barX + barW - 50}" y="${top + 13}" class="val">${esc(checkValue(c))} (${esc(checkRequired(c))}) <tspan fill="${color}" font-weight="bold">${verdict(c)}</tspan></text>`);
    y += 24;
  }
  y += 6;
  line(`<text x="16" y="${y + 10}" class="sub">Black tick = required value. Bars per row are on their own scale.</text>`);
  y += 24;

  const width = W + 120;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif">`,
    '<style>.title{font-size:16px;font-weight:600;fill:#111827}.sub{font-size:11px;fill:#4b5563}.group{font-size:13px;font-weight:600;fill:#111827}.label{font-size:12px;fill:#111827}.val{font-size:11px;fill:#374151}</style>',
    `<rect width="${width}" height="${y}" fill="#ffffff"/>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}

module.exports = { text, markdown, svg };
