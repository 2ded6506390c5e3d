// Launches Debian's chromium through playwright-core: never a downloaded browser, no network,
// a fresh profile per launch; opens a viewer page in it and waits on the page.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export async function launchBrowser() {
  const profile = mkdtempSync(join(tmpdir(), 'cumemtrace-viewer-profile-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CUMEMTRACE_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--no-first-run', '--disable-sync'],
    viewport: { width: 1400, height: 1000 },
  });
  // report.html must not reach the network: fail any request that is not the file itself.
  await context.route((url) => !url.protocol.startsWith('file'), (route) => route.abort());
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// Opens the page at file `path` in a new tab (at `viewport`, if given) and waits for the viewer
// to be ready. `problems` collects what the page reports: console errors and warnings,
// uncaught exceptions, failed requests.
export async function openViewer(browser, path, viewport) {
  const page = await browser.context.newPage();
  if (viewport) await page.setViewportSize(viewport);
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('requestfailed', (r) => problems.push('request failed: ' + r.url()));
  await page.goto(pathToFileURL(path).href);
  await until(page, () => window.cumemtraceViewer && window.cumemtraceViewer.ready);
  return { page, problems };
}

// Polls `predicate` in the page until it holds (page.waitForFunction evaluates strings when it
// polls, which the page's Content-Security-Policy refuses).
export async function until(page, predicate, arg) {
  for (let i = 0; i < 100; i++) {
    if (await page.evaluate(predicate, arg)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`never true: ${predicate}`);
}
