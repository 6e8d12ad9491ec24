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

function unitValue(x, unit, signed) {
  if (x == null) return 'n/a';
  const sign = signed && x >= 0 ? '+' : '';
  if (unit === 'x') return ratio(x);
  if (unit === 'ms') return `${sign}${x.toFixed(3)} ms`;
  if (unit === 'MiB') return `${sign}${x.toFixed(1)} MiB`;
  if (unit === 's') return `${x.toFixed(3)} s`;
  if (unit === 'µs') return `${sign}${x.toFixed(2)} µs`;
  return String(x);
}

function checkValue(c) {
  if (c.measured == null) return c.pending ? 'not measured' : 'n/a';
  return unitValue(c.measured, c.unit, c.unit === 'ms' || c.unit === 'MiB' || c.unit === 'µs');
}

function checkRequired(c) {
  if (c.threshold == null) return '—';
  const op = c.op === '>=' ? '≥' : '≤';
  if (c.unit === 'x') return `${op} ${c.threshold}×`;
  return `${op} ${c.op === '<=' && c.unit !== 's' ? '+' : ''}${c.threshold} ${c.unit}`;
}

function checkStretch(c) {
  if (c.stretch == null) return '';
  const op = c.op === '>=' ? '≥' : '≤';
  return c.unit === 'x' ? `${op} ${c.stretch}×` : `${op} ${c.stretch} ${c.unit}`;
}

function verdict(c) {
  if (c.kind === 'peer') return c.win == null ? 'n/a' : c.win ? 'faster' : 'SLOWER';
  if (c.pass == null) return c.pending ? 'not measured' : 'n/a';
  if (!c.pass) return 'FAIL';
  return c.stretchMet ? 'PASS (stretch met)' : 'PASS';
}

function verdictMd(c) {
  if (c.kind === 'peer') return c.win == null ? 'n/a' : c.win ? 'faster' : '**slower**';
  if (c.pass == null) return c.pending ? `not measured: ${md(c.pending)} not in this build yet` : 'n/a';
  if (!c.pass) return '❌ fail';
  return c.stretchMet ? '✅ pass, stretch met' : c.stretch != null ? '✅ pass (stretch not met)' : '✅ pass';
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
  const l = r.loader;
  return [
    `${r.date.slice(0, 19).replace('T', ' ')} UTC · ${r.machine.cpuModel.trim()} · ${r.machine.cores} cores · Node ${r.machine.node}${s.quick ? ' · QUICK smoke run' : ''}`,
    `${s.rounds} rounds × ${s.duration} s per target and connection count, ${s.warmup} s warm-up, round-robin, medians; client auth ${s.clientAuth === 'basic' ? 'client_secret_basic' : 'client_secret_post'}`,
    `${r.machine.pinned ? `server pinned to CPU ${s.serverCpu}, load generator (wrk ${r.versions?.wrk ?? ''}, 1 thread) to CPU ${s.loadCpu}` : 'unpinned'}` +
      `${s.spinning ? '; idle cores kept busy (SCHED_IDLE) during the 1-connection runs' : ''}` +
      (l && l.ceiling
        ? `; loader's own ceiling ${num(l.ownCeiling ?? l.ceiling)} req/s (bare node:http driven at ${num(l.ceiling)} req/s with wrk at ${Math.round((l.loaderCpuShare || 0) * 100)}% of its core), ${l.headroom}× the fastest target`
        : ''),
  ];
}

function settingsLine(r) {
  return settingsLines(r).join(' · ');
}

const KIND_TITLES = [
  ['target', 'Targets'],
  ['loader', 'Load generator'],
  ['peer', 'Ratios (≥ 1× means OURS is faster; every one, lost ones included)'],
];

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
      out.push(`${title} — ${c} connection${c === 1 ? '' : 's'}`);
      out.push(`${pad('target', 72)}${pad('req/s', 28)}${pad('p50 ms', 26)}${pad('p99 ms', 26)}${pad('× Express', 11)}CPU µs/req`);
      for (const t of ts) {
        const m = r.medians[t.id][c];
        out.push(
          `${pad((t.ours ? '* ' : '  ') + t.label, 72)}${pad(withRange(m.rps, (x) => num(x)), 28)}${pad(withRange(m.p50, ms), 26)}${pad(withRange(m.p99, ms), 26)}${pad(ratio(m.ratioToExpress), 11)}${m.cpuUs && m.cpuUs.median != null ? Math.round(m.cpuUs.median) : 'n/a'}`,
        );
      }
    }
  }
  if (r.startup) out.push('', startupSentence(r.startup));
  if (r.memory) out.push('', memorySentence(r.memory));
  for (const [kind, title] of KIND_TITLES) {
    const cs = r.checks.filter((c) => c.kind === kind);
    if (!cs.length) continue;
    out.push('');
    out.push(title);
    for (const c of cs) {
      out.push(`  ${pad(verdict(c), 20)} ${pad(c.label + (c.pending ? ` (${c.pending}: not in this build)` : ''), 92)} ${pad(checkValue(c), 14, true)}  ${c.byCpu != null ? `[by CPU ${ratio(c.byCpu)}] ` : ''}${c.threshold != null ? `(required ${checkRequired(c)}${c.stretch != null ? `, stretch ${checkStretch(c)}` : ''})` : ''}`);
      if (c.detail) out.push(`  ${pad('', 20)}   ${c.detail}`);
    }
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

function startupSentence(s) {
  return (
    `Start-up (median of ${s.runs.example.length}): the example server answers ${s.example.firstAnswerS} s after it is spawned on a fresh DATA_DIR ` +
    `(${s.exampleRestart.firstAnswerS} s on an existing one), with ${s.example.rssMiB} MiB resident; a bare Express app answers after ${s.express.firstAnswerS} s with ${s.express.rssMiB} MiB.`
  );
}

function memorySentence(m) {
  const a = m.runs['ours-whoami'];
  const b = m.runs['ours-health'];
  return (
    `Memory: ${m.requests.toLocaleString('en-US')} requests to /api/whoami over ${m.tokens.toLocaleString('en-US')} distinct tokens peak at ${mib(a.peakRss)} (idle ${mib(a.idleRss)}); ` +
    `the same number to /health in a fresh process at ${mib(b.peakRss)} (idle ${mib(b.idleRss)}).`
  );
}

// --------------------------------------------------------------- markdown
function md(s) {
  return String(s).replace(/\|/g, '\\|');
}

/** Markdown for the README's Performance section (the lead adds the prose). */
function markdown(r) {
  const conns = r.settings.connections;
  const out = [];
  out.push('<!-- generated by bench/run.js (npm run bench) -->');
  out.push(`_${md(settingsLine(r))}._`);
  for (const [kind, title] of KIND_TITLES) {
    const cs = r.checks.filter((c) => c.kind === kind);
    if (!cs.length) continue;
    out.push('');
    out.push(`#### ${title}`);
    out.push('');
    if (kind === 'peer') {
      out.push('| Comparison | Ratio | By server CPU time | Result |');
      out.push('| :-- | --: | --: | :-: |');
      for (const c of cs) out.push(`| ${md(c.label)} | ${checkValue(c)} | ${c.byCpu == null ? '' : ratio(c.byCpu)} | ${verdictMd(c)} |`);
      const details = cs.filter((c) => c.detail && c.short);
      if (details.length) {
        out.push('');
        for (const c of details) out.push(`- ${md(c.short)}: ${md(c.detail)}`);
      }
    } else {
      out.push('| Target | Measured | Required | Stretch | Result | By server CPU time |');
      out.push('| :-- | --: | --: | --: | :-: | --: |');
      for (const c of cs) out.push(`| ${md(c.label)} | ${checkValue(c)} | ${checkRequired(c)} | ${checkStretch(c)} | ${verdictMd(c)} | ${c.byCpu == null ? '' : ratio(c.byCpu)} |`);
      const details = cs.filter((c) => c.detail);
      if (details.length) {
        out.push('');
        for (const c of details) out.push(`- ${md(c.short)}: ${md(c.detail)}`);
      }
    }
    if (kind === 'target') {
      out.push('');
      out.push('Ratios are of throughput (medians). "By server CPU time" is the same ratio from the servers\' CPU time per request (utime + stime over each measurement): a cross-check that other processes on the machine disturb much less.');
    }
  }
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
      head.push(`req/s (${cl})`, `p50 (${cl})`, `p99 (${cl})`, `× Express (${cl})`, `CPU µs/req (${cl})`);
      align.push('--:', '--:', '--:', '--:', '--:');
    }
    out.push(`| ${head.join(' | ')} |`);
    out.push(`| ${align.join(' | ')} |`);
    for (const t of ts) {
      const cells = [t.ours ? `**${md(t.label)}**` : md(t.label)];
      for (const c of conns) {
        const m = r.medians[t.id][c];
        cells.push(withRange(m.rps, (x) => num(x)), withRange(m.p50, ms), withRange(m.p99, ms), ratio(m.ratioToExpress), m.cpuUs && m.cpuUs.median != null ? num(m.cpuUs.median, { digits: 0 }) : 'n/a');
      }
      out.push(`| ${cells.join(' | ')} |`);
    }
  }
  if (r.startup || r.memory) {
    out.push('');
    out.push('#### Start-up and memory');
    out.push('');
    if (r.startup) out.push(`- ${md(startupSentence(r.startup))}`);
    if (r.memory) out.push(`- ${md(memorySentence(r.memory))}`);
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
  if (t.id === 'ours-health') return '#93c5fd';
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
  for (const c of r.checks.filter((x) => x.threshold != null)) {
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
