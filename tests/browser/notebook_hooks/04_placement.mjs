// 04_placement: what the live player (made inside `with mg.trace()`) shows once the block has ended,
// and how the side-by-side players are laid out.
export async function after({ page, report, cellIndex }) {
  const live = await cellIndex('from IPython.display import display');
  const row = await cellIndex(
    'from jupyter_mgpu.widgets.placement import side_by_side'
  );
  report(
    'placement',
    await page.evaluate(
      ([li, ri]) => {
        const cells = window.jupyterapp.shell.currentWidget.content.widgets;
        const p = cells[li].node.querySelector('.mgpu-placement');
        const players = Array.from(
          cells[ri].node.querySelectorAll('.mgpu-placement')
        ).map(x => x.getBoundingClientRect());
        const area = cells[ri].node
          .querySelector('.jp-OutputArea-output')
          .getBoundingClientRect();
        return {
          live: {
            counter: p.querySelector('.mgpu-player-counter').textContent,
            play: p.querySelector('.mgpu-player-play, .mgpu-player-pause')
              .textContent,
            title: p.querySelector('b').textContent,
            badge: p.querySelector('.mgpu-badge').textContent,
            arrowsOrTiles: p.querySelectorAll('.mgpu-tile').length
          },
          row: {
            players: players.map(r => [
              Math.round(r.left - area.left),
              Math.round(r.right - area.left)
            ]),
            width: Math.round(area.width)
          }
        };
      },
      [live, row]
    )
  );
}
