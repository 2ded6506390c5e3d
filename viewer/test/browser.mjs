// Launches Debian's chromium through playwright-core: never a downloaded browser, no network,
// a fresh profile per launch.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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
