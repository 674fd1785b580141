/**
 * The anywidget front ends (jupyter_mgpu/widgets/static/*.js) as the browser gets them, for jsdom tests.
 *
 * Python sends the players (player.js, placement.js, schedule.js) with transport.js prepended
 * (`module_source` in widgets/transport.py) and memory.js alone (`_esm` in widgets/memory_dashboard.py).
 * Here that source is evaluated in the test's window the way the standalone HTML page runs it
 * (widgets/standalone_page.py: the `export` keywords dropped), in strict mode like an ES module, and
 * the named top-level functions and constants come back.
 */
import * as fs from 'fs';
import * as path from 'path';

export const STATIC = path.join(
  __dirname,
  '..',
  '..',
  'jupyter_mgpu',
  'widgets',
  'static'
);

const read = (name: string): string =>
  fs.readFileSync(path.join(STATIC, name), 'utf8');

/** The module's source as Python sends it. */
export function moduleSource(name: string): string {
  return name === 'memory.js'
    ? read(name)
    : read('transport.js') + '\n' + read(name);
}

/** Evaluate `name`'s module source and return its top-level bindings `names`. */
export function loadWidget(name: string, names: string[]): Record<string, any> {
  const js = moduleSource(name)
    .split('export function ')
    .join('function ')
    .split('export default { render };')
    .join('');
  const body = `'use strict';\n${js}\nreturn { ${names.join(', ')} };`;
  return new Function(body)();
}

type Handler = () => void;

/** A widget model like the standalone page's: get/set (firing `change:<key>`), on/off, save_changes. */
export interface IFakeModel {
  state: Record<string, any>;
  get(key: string): any;
  set(key: string, value: any): void;
  on(event: string, f: Handler): void;
  off(event: string, f: Handler): void;
  save_changes: jest.Mock;
}

export function fakeModel(state: Record<string, any>): IFakeModel {
  const handlers: Record<string, Handler[]> = {};
  return {
    state,
    get: key => state[key],
    set: (key, value) => {
      const old = state[key];
      state[key] = value;
      if (old !== value) {
        (handlers[`change:${key}`] || []).forEach(f => f());
      }
    },
    on: (event, f) => {
      (handlers[event] = handlers[event] || []).push(f);
    },
    off: (event, f) => {
      handlers[event] = (handlers[event] || []).filter(g => g !== f);
    },
    save_changes: jest.fn()
  };
}
