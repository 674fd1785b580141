// One Chromium for every browser script a pytest worker runs (tests/lab_server.py starts it with the lab):
// launched as openBrowser would (Playwright's flags, ours, a persistent profile in cfg.profile so the HTTP and
// compiled-code caches stay warm), with its DevTools endpoint on loopback, which each script's openBrowser
// connects to (cfg.cdp) for a page of its own. A launch and a fresh profile cost about a second and 1.1 CPU-s
// per script on 2 cores (measured). Prints {"cdp": endpoint} once up; ends the browser when its stdin closes
// (the test process ended, however it ended), and itself when the browser ends.
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { cfg, chromiumArgs, SHARED_ARGS } from './chromium.mjs';

const context = await chromium.launchPersistentContext(cfg.profile, {
  executablePath: cfg.chromium,
  headless: true,
  viewport: null, // each script sets its page's own; the host must not emulate one over it
  args: chromiumArgs([
    ...SHARED_ARGS,
    '--remote-debugging-address=127.0.0.1',
    '--remote-debugging-port=0',
    '--window-size=1280,900'
  ])
});
const port = fs
  .readFileSync(path.join(cfg.profile, 'DevToolsActivePort'), 'utf8')
  .split('\n')[0];
process.stdout.write(
  JSON.stringify({ cdp: `http://127.0.0.1:${port}`, pid: process.pid }) + '\n'
);
let ending = false;
const end = async () => {
  ending = true;
  await context.close().catch(() => {});
  process.exit(0);
};
// the browser died: exit, and the next run_script starts another
context.on('close', () => process.exit(ending ? 0 : 1));
process.stdin.on('end', end);
process.stdin.on('error', end);
process.stdin.resume();
