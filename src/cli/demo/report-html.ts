/**
 * The demo's chart: one self-contained HTML file (inline SVG and CSS, no network) with a panel per
 * run. Each panel shows requests started per 100 ms against the server's limit (429s in red and
 * marked), pauses shaded, and cumulative spend against the budget on a second axis.
 *
 * Elements carry classes (`bar ok`, `bar throttled`, `limit`, `pause`, `spend`, `budget`) so tests
 * can check the structure; a small inline script records what the browser laid out in
 * `data-rendered` on <body>, so a headless browser can prove it drew the charts.
 */
import type { AttemptRecord } from '../runner.js';

export interface ChartRun {
  readonly title: string;
  /** One line under the title. */
  readonly subtitle: string;
  readonly attempts: readonly AttemptRecord[];
  readonly pauses: readonly { readonly at: number; readonly untilMs: number }[];
  /** Money actually spent, in completion order. */
  readonly spend: readonly { readonly at: number; readonly micros: number }[];
  /** Time 0 of the panel (the run's first start). */
  readonly origin: number;
}

export interface ReportInput {
  readonly title: string;
  /** What the server enforced, e.g. "50 requests/s (token bucket, burst 10)". */
  readonly limitLabel: string;
  /** Sustained server limit per bin (requests per 100 ms). */
  readonly limitPerBin: number;
  readonly budgetMicros: number;
  readonly runs: readonly ChartRun[];
  /** Rows of the comparison table: [label, ...one cell per run]. */
  readonly table: readonly (readonly string[])[];
  readonly notes: readonly string[];
}

const binMs = 100;
const width = 960;
const height = 300;
const margin = { top: 24, right: 70, bottom: 36, left: 52 };

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function dollars(micros: number): string {
  return `$${(micros / 1e6).toFixed(2)}`;
}

/** 1, 2 or 5 times a power of ten, at least `raw`: tick steps people read at a glance. */
function niceStep(raw: number): number {
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

function round(n: number): string {
  return String(Math.round(n * 10) / 10);
}

/** One run's panel as an SVG element. `spanMs` is shared by all panels so they compare at a glance. */
export function panelSvg(
  run: ChartRun,
  input: ReportInput,
  spanMs: number,
  maxPerBin: number,
  maxSpend: number,
): string {
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const bins = Math.max(1, Math.ceil(spanMs / binMs));
  const x = (ms: number) => margin.left + (Math.max(0, Math.min(ms, spanMs)) / spanMs) * plotW;
  const y = (count: number) => margin.top + plotH - (count / maxPerBin) * plotH;
  const ySpend = (micros: number) => margin.top + plotH - (micros / maxSpend) * plotH;
  const barW = Math.max(1, plotW / bins - 1);

  const ok = new Array<number>(bins).fill(0);
  const throttled = new Array<number>(bins).fill(0);
  const other = new Array<number>(bins).fill(0);
  for (const a of run.attempts) {
    const i = Math.min(bins - 1, Math.max(0, Math.floor((a.startedAt - run.origin) / binMs)));
    if (a.status === 429) throttled[i]!++;
    else if (a.status !== undefined && a.status < 400) ok[i]!++;
    else other[i]!++;
  }

  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${escapeHtml(run.title)}">`,
  );
  parts.push(`<rect class="frame" x="${margin.left}" y="${margin.top}" width="${plotW}" height="${plotH}"/>`);
  // Pauses first, so bars draw over the shading.
  for (const p of run.pauses) {
    const x0 = x(p.at - run.origin);
    const x1 = x(p.untilMs - run.origin);
    if (x1 - x0 <= 0) continue;
    parts.push(
      `<rect class="pause" x="${round(x0)}" y="${margin.top}" width="${round(Math.max(1, x1 - x0))}" height="${plotH}"><title>paused ${Math.round(p.untilMs - p.at)} ms</title></rect>`,
    );
  }
  // Axes and grid.
  const stepCount = maxPerBin <= 10 ? 1 : maxPerBin <= 25 ? 5 : 10;
  for (let c = 0; c <= maxPerBin; c += stepCount) {
    parts.push(
      `<line class="grid" x1="${margin.left}" x2="${margin.left + plotW}" y1="${round(y(c))}" y2="${round(y(c))}"/>`,
    );
    parts.push(
      `<text class="tick" x="${margin.left - 6}" y="${round(y(c) + 4)}" text-anchor="end">${c}</text>`,
    );
  }
  const secondStep = spanMs > 30_000 ? 5_000 : spanMs > 12_000 ? 2_000 : 1_000;
  for (let t = 0; t <= spanMs; t += secondStep) {
    parts.push(
      `<text class="tick" x="${round(x(t))}" y="${margin.top + plotH + 16}" text-anchor="middle">${t / 1000}s</text>`,
    );
  }
  parts.push(
    `<text class="axis" x="14" y="${margin.top + plotH / 2}" transform="rotate(-90 14 ${margin.top + plotH / 2})" text-anchor="middle">requests started / 100 ms</text>`,
  );
  parts.push(
    `<text class="axis spend-axis" x="${width - 12}" y="${margin.top + plotH / 2}" transform="rotate(90 ${width - 12} ${margin.top + plotH / 2})" text-anchor="middle">cumulative spend</text>`,
  );
  // Bars: accepted at the bottom, then other failures, then 429s on top.
  for (let i = 0; i < bins; i++) {
    const x0 = round(margin.left + (i * plotW) / bins);
    let base = 0;
    const stack = (count: number, cls: string, label: string) => {
      if (count === 0) return;
      parts.push(
        `<rect class="bar ${cls}" x="${x0}" y="${round(y(base + count))}" width="${round(barW)}" height="${round(y(base) - y(base + count))}"><title>${(i * binMs) / 1000}s: ${count} ${label}</title></rect>`,
      );
      base += count;
    };
    stack(ok[i]!, 'ok', 'accepted');
    stack(other[i]!, 'failed', 'failed');
    stack(throttled[i]!, 'throttled', '× 429');
    if (throttled[i]! > 0) {
      // A marker above each bin that drew 429s.
      const cx = Number(x0) + barW / 2;
      const top = y(base) - 4;
      parts.push(
        `<path class="mark-429" d="M${round(cx - 3)},${round(top - 6)} L${round(cx + 3)},${round(top - 6)} L${round(cx)},${round(top)} Z"/>`,
      );
    }
  }
  // The server's sustained limit per 100 ms.
  parts.push(
    `<line class="limit" x1="${margin.left}" x2="${margin.left + plotW}" y1="${round(y(input.limitPerBin))}" y2="${round(y(input.limitPerBin))}"/>`,
  );
  parts.push(
    `<text class="limit-label" x="${margin.left + 6}" y="${round(y(input.limitPerBin) - 5)}">server limit: ${escapeHtml(input.limitLabel)}</text>`,
  );
  // Budget and cumulative spend (right axis).
  parts.push(
    `<line class="budget" x1="${margin.left}" x2="${margin.left + plotW}" y1="${round(ySpend(input.budgetMicros))}" y2="${round(ySpend(input.budgetMicros))}"/>`,
  );
  parts.push(
    `<text class="budget-label" x="${margin.left + plotW - 6}" y="${round(ySpend(input.budgetMicros) - 5)}" text-anchor="end">budget ${dollars(input.budgetMicros)}</text>`,
  );
  const spendStep = niceStep(maxSpend / 4);
  for (let m = 0; m <= maxSpend + 1e-9; m += spendStep) {
    parts.push(
      `<text class="tick" x="${margin.left + plotW + 6}" y="${round(ySpend(m) + 4)}">${dollars(m)}</text>`,
    );
  }
  let total = 0;
  const points: string[] = [`${round(x(0))},${round(ySpend(0))}`];
  for (const s of [...run.spend].sort((a, b) => a.at - b.at)) {
    total += s.micros;
    points.push(`${round(x(s.at - run.origin))},${round(ySpend(total))}`);
  }
  parts.push(`<polyline class="spend" points="${points.join(' ')}"/>`);
  parts.push('</svg>');
  return parts.join('\n');
}

const css = `
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1000px; color: #1d2430; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 16px; margin: 28px 0 2px; }
p.sub { margin: 0 0 6px; color: #4a5568; }
svg { display: block; max-width: 100%; height: auto; background: #fff; }
.frame { fill: #fbfcfe; stroke: #d5dbe5; }
.grid { stroke: #e8ecf2; }
.tick { font-size: 11px; fill: #5a6577; }
.axis { font-size: 12px; fill: #3c4657; }
.bar.ok { fill: #3b82c4; }
.bar.failed { fill: #8d99ab; }
.bar.throttled { fill: #d64541; }
.mark-429 { fill: #d64541; }
.pause { fill: #f6c26b; opacity: 0.35; }
.limit { stroke: #1d2430; stroke-width: 1.5; stroke-dasharray: 6 4; }
.limit-label { font-size: 12px; fill: #1d2430; paint-order: stroke; stroke: #fff; stroke-width: 4px; }
.budget { stroke: #2f9e5b; stroke-width: 1.5; stroke-dasharray: 3 3; }
.budget-label { font-size: 12px; fill: #2f9e5b; paint-order: stroke; stroke: #fff; stroke-width: 4px; }
.spend { fill: none; stroke: #2f9e5b; stroke-width: 2.2; }
table { border-collapse: collapse; margin: 16px 0; }
th, td { border-bottom: 1px solid #e2e7ee; padding: 6px 14px; text-align: left; }
th { background: #f3f6fa; }
.legend span { display: inline-block; margin-right: 16px; }
.sw { display: inline-block; width: 12px; height: 12px; vertical-align: -1px; margin-right: 5px; }
`;

// Records what the browser laid out, for a headless check that the charts were drawn.
const probe = `
addEventListener('load', () => {
  const svgs = [...document.querySelectorAll('svg')];
  const size = (sel) => [...document.querySelectorAll(sel)].reduce((n, el) => n + el.getBBox().width * el.getBBox().height, 0);
  document.body.dataset.rendered = JSON.stringify({
    panels: svgs.length,
    width: Math.round(svgs.reduce((w, s) => w + s.getBoundingClientRect().width, 0)),
    barArea: Math.round(size('rect.bar')),
    spendLength: Math.round([...document.querySelectorAll('polyline.spend')].reduce((n, p) => n + p.getTotalLength(), 0)),
  });
});`;

/** The whole report page. */
export function reportHtml(input: ReportInput): string {
  const spanMs = Math.max(
    1_000,
    ...input.runs.map((r) => {
      const ends = [
        ...r.attempts.map((a) => a.startedAt),
        ...r.spend.map((s) => s.at),
        ...r.pauses.map((p) => p.untilMs),
      ];
      return Math.max(0, ...ends) - r.origin;
    }),
  );
  const bins = Math.ceil(spanMs / binMs);
  let maxPerBin = Math.ceil(input.limitPerBin * 2);
  for (const r of input.runs) {
    const counts = new Array<number>(bins + 1).fill(0);
    for (const a of r.attempts)
      counts[Math.min(bins, Math.max(0, Math.floor((a.startedAt - r.origin) / binMs)))]!++;
    maxPerBin = Math.max(maxPerBin, ...counts);
  }
  const spendTotals = input.runs.map((r) => r.spend.reduce((n, s) => n + s.micros, 0));
  const maxSpend = Math.max(input.budgetMicros * 1.4, ...spendTotals) || 1;
  const panels = input.runs
    .map(
      (r) =>
        `<h2>${escapeHtml(r.title)}</h2>\n<p class="sub">${escapeHtml(r.subtitle)}</p>\n${panelSvg(r, input, spanMs, maxPerBin, maxSpend)}`,
    )
    .join('\n');
  const [head, ...rows] = input.table;
  const table = head
    ? `<table>\n<tr>${head.map((h) => `<th>${escapeHtml(h)}</th>`).join('')}</tr>\n${rows
        .map((row) => `<tr>${row.map((c) => `<td>${escapeHtml(c)}</td>`).join('')}</tr>`)
        .join('\n')}\n</table>`
    : '';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(input.title)}</title>
<style>${css}</style>
</head>
<body>
<h1>${escapeHtml(input.title)}</h1>
<p class="legend"><span><i class="sw" style="background:#3b82c4"></i>accepted</span><span><i class="sw" style="background:#d64541"></i>answered 429 (▼ marks the bin)</span><span><i class="sw" style="background:#f6c26b;opacity:.5"></i>paused</span><span><i class="sw" style="background:#2f9e5b"></i>cumulative spend / budget (right axis)</span><span>- - server limit per 100 ms</span></p>
${table}
${panels}
${input.notes.map((n) => `<p class="sub">${escapeHtml(n)}</p>`).join('\n')}
<script>${probe}</script>
</body>
</html>
`;
}
