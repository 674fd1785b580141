// 01_quickstart: with the Multi-GPU sidebar open for the whole Run All, record what it shows every
// 100 ms — cluster status, each rank's label, figures and state, whether any piece of text is broken
// inside a word — and the dashboard's limit next to the sidebar's for the same rank.
import path from 'node:path';

export async function during({ page, report, cfg }) {
  await page.click('.jp-mgpu-status');
  await page.waitForSelector('#jupyter-mgpu-panel:not(.lm-mod-hidden)', {
    timeout: 10000
  });
  const seen = [];
  const shots = new Set();
  let same = null;
  while (!(await page.evaluate(() => window.__mgpuDone))) {
    const snap = await page.evaluate(() => {
      const cards = Array.from(
        document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-cluster')
      ).map(card => ({
        id: card.dataset.clusterId,
        status: card.dataset.status,
        title: card.querySelector('.jp-mgpu-cluster-title').textContent,
        ranks: Array.from(card.querySelectorAll('.jp-mgpu-rank')).map(r => ({
          state: r.dataset.state,
          label: r.querySelector('.jp-mgpu-label').textContent,
          figures: r.querySelector('.jp-mgpu-figures').textContent
        })),
        // a piece of the meta line laid out on more than one line was broken inside a word
        broken: Array.from(card.querySelectorAll('.jp-mgpu-piece'))
          .filter(p => p.getClientRects().length > 1)
          .map(p => p.textContent)
      }));
      const row = document.querySelector(
        '.mgpu-mem .mgpu-mem-row[data-rank="0"] .mgpu-mem-text'
      );
      const title = document.querySelector('.mgpu-mem .mgpu-mem-title');
      return {
        cards,
        dashboard: row
          ? { text: row.textContent, title: title.textContent }
          : null
      };
    });
    seen.push(snap.cards);
    for (const status of ['restarting', 'running']) {
      // a picture of the sidebar the first time it shows each
      if (snap.cards.some(c => c.status === status) && !shots.has(status)) {
        shots.add(status);
        await page.screenshot({
          path: path.join(cfg.artifacts, `sidebar_${status}.png`)
        });
      }
    }
    // the same rank of the same cluster in both views
    const card =
      snap.dashboard &&
      snap.cards.find(c => snap.dashboard.title.endsWith(`cluster ${c.id}`));
    if (!same && card && card.ranks[0]?.figures) {
      same = { sidebar: card.ranks[0].figures, dashboard: snap.dashboard.text };
    }
    await page.waitForTimeout(100);
  }
  report('sidebar', { seen, same });
}
