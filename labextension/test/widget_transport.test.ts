/**
 * @jest-environment jsdom
 */
/** The players' shared transport (static/transport.js) and the frame player (static/player.js). */
import { fakeModel, IFakeModel, loadWidget } from './widget_source';

const { playerHead, transport, render, PLAYER_CARD } = loadWidget('player.js', [
  'playerHead',
  'transport',
  'render',
  'PLAYER_CARD'
]);

const button = (controls: HTMLElement, cls: string) =>
  controls.querySelector<HTMLButtonElement>(`.mgpu-player-${cls}`)!;

function player(
  frames: number,
  state: Record<string, any> = {},
  opts?: Record<string, any>
): { model: IFakeModel; t: any } {
  const model = fakeModel({
    index: 0,
    playing: false,
    loop: false,
    interval_ms: 100,
    speed: 1,
    ...state
  });
  const t = transport(model, () => frames, opts);
  document.body.appendChild(t.controls);
  return { model, t };
}

afterEach(() => {
  jest.useRealTimers();
  document.body.replaceChildren();
});

describe('transport.js', () => {
  it('makes the head: a badge and a title', () => {
    const { head, badge, title } = playerHead();
    expect(head.children).toHaveLength(2);
    expect(badge.className).toBe('mgpu-badge');
    expect(title.tagName).toBe('B');
    expect(PLAYER_CARD).toContain('background:#fff');
  });

  it('has first / back / play / forward / last, a slider and a counter', () => {
    const { t } = player(5);
    const classes = Array.from(t.controls.children as HTMLCollection).map(
      c => c.className
    );
    expect(classes).toEqual([
      'mgpu-player-first',
      'mgpu-player-step-back',
      'mgpu-player-play',
      'mgpu-player-step-forward',
      'mgpu-player-last',
      'mgpu-player-slider',
      'mgpu-player-counter'
    ]);
    expect(t.controls.querySelector('.mgpu-player-speed')).toBeNull();
  });

  it('steps within the frames, stopping the play', () => {
    const { model, t } = player(5, { playing: true });
    button(t.controls, 'step-forward').click();
    expect(model.state.index).toBe(1);
    expect(model.state.playing).toBe(false);
    expect(model.save_changes).toHaveBeenCalled();
    button(t.controls, 'last').click();
    expect(model.state.index).toBe(4);
    button(t.controls, 'step-forward').click();
    expect(model.state.index).toBe(4); // clamped at the last frame
    button(t.controls, 'step-back').click();
    expect(model.state.index).toBe(3);
    button(t.controls, 'first').click();
    expect(model.state.index).toBe(0);
    button(t.controls, 'step-back').click();
    expect(model.state.index).toBe(0); // clamped at the first
    const slider = t.controls.querySelector('.mgpu-player-slider');
    slider.value = '2';
    slider.dispatchEvent(new Event('input'));
    expect(model.state.index).toBe(2);
  });

  it('shows the step, the slider and the play button state', () => {
    const { model, t } = player(5);
    t.show(2);
    const slider = t.controls.querySelector('.mgpu-player-slider');
    expect(slider.max).toBe('4');
    expect(slider.value).toBe('2');
    expect(t.controls.querySelector('.mgpu-player-counter').textContent).toBe(
      'step 2 / 4'
    );
    expect(button(t.controls, 'play').textContent).toBe('▶');
    model.state.playing = true;
    t.show(2);
    const pause = button(t.controls, 'pause');
    expect(pause.textContent).toBe('||');
    expect(pause.title).toBe('pause');
  });

  it('plays from the start when at the end, and pauses when playing', () => {
    const { model, t } = player(5, { index: 4 });
    button(t.controls, 'play').click();
    expect(model.state.index).toBe(0);
    expect(model.state.playing).toBe(true);
    button(t.controls, 'play').click();
    expect(model.state.playing).toBe(false);
    expect(model.state.index).toBe(0);
  });

  it('ticks every interval_ms / speed, stopping at the end unless it loops or is live', () => {
    jest.useFakeTimers();
    const { model } = player(3, { interval_ms: 100, speed: 2 });
    model.set('playing', true); // change:playing starts the timer
    jest.advanceTimersByTime(50);
    expect(model.state.index).toBe(1);
    jest.advanceTimersByTime(50);
    expect(model.state.index).toBe(2);
    expect(model.state.playing).toBe(false); // reached the end, no loop
    jest.advanceTimersByTime(500);
    expect(model.state.index).toBe(2);

    const looping = player(2, { loop: true }).model;
    looping.set('playing', true);
    jest.advanceTimersByTime(100);
    expect(looping.state.index).toBe(1);
    expect(looping.state.playing).toBe(true);
    jest.advanceTimersByTime(100);
    expect(looping.state.index).toBe(0);

    const live = player(2, {}, { live: () => true }).model;
    live.set('playing', true);
    jest.advanceTimersByTime(300);
    expect(live.state.index).toBe(1);
    expect(live.state.playing).toBe(true); // a live player waits for more frames
  });

  it('offers the speeds and sets the chosen one', () => {
    const { model, t } = player(5, {}, { speeds: [0.5, 1, 2] });
    const speed = t.controls.querySelector('.mgpu-player-speed');
    expect(
      Array.from(speed.options as HTMLOptionsCollection).map(o => o.textContent)
    ).toEqual(['0.5×', '1×', '2×']);
    speed.value = '2';
    speed.dispatchEvent(new Event('change'));
    expect(model.state.speed).toBe(2);
    t.show(0);
    expect(speed.value).toBe('2');
  });
});

describe('player.js', () => {
  it('shows frames[index] with its caption, badge and title', () => {
    const model = fakeModel({
      index: 0,
      playing: false,
      loop: false,
      interval_ms: 100,
      frames: ['<svg class="f0"></svg>', '<svg class="f1"></svg>'],
      captions: ['first', 'second'],
      show_captions: true,
      badge: '',
      title: 'ring all-reduce'
    });
    const el = document.createElement('div');
    const stop = render({ model, el });
    expect(typeof stop).toBe('function');
    const root = el.querySelector<HTMLElement>('.mgpu-player')!;
    expect(root.querySelector('svg.f0')).not.toBeNull();
    expect(root.querySelector('b')!.textContent).toBe('ring all-reduce');
    expect(root.querySelector<HTMLElement>('.mgpu-badge')!.style.display).toBe(
      'none'
    );
    expect(root.textContent).toContain('first');
    button(root, 'step-forward').click();
    expect(root.querySelector('svg.f1')).not.toBeNull();
    expect(root.querySelector('.mgpu-player-counter')!.textContent).toBe(
      'step 1 / 1'
    );
    model.set('badge', 'logical');
    expect(root.querySelector<HTMLElement>('.mgpu-badge')!.style.display).toBe(
      ''
    );
    stop();
  });
});
