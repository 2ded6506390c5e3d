// The data embedded in a report.html (#cumemtrace-data), to read and to write back changed:
// tests make pages the engine cannot make yet (stacks, the allocator bridge's kinds) from real
// exports of golden traces.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const DATA_OPEN = '<script id="cumemtrace-data" type="application/json">';

export function readPage(work, name) {
  const html = readFileSync(join(work, name + '.html'), 'utf8');
  const at = html.indexOf(DATA_OPEN) + DATA_OPEN.length, end = html.indexOf('</script>', at);
  assert.ok(at > DATA_OPEN.length && end > at, `${name}.html holds the page data`);
  return { before: html.slice(0, at), data: JSON.parse(html.slice(at, end)), after: html.slice(end) };
}

// As EscapeJsonForScript does: nothing in the data can end or change the script element.
export function writePage(work, page, file) {
  const text = JSON.stringify(page.data).replace(/[<>&\u2028\u2029]/g,
    (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  writeFileSync(join(work, file), page.before + text + page.after);
}

// A base64 column of the page data as a typed array, and back.
export function column(b64, Type) {
  return new Type(new Uint8Array(Buffer.from(b64, 'base64')).buffer);
}
export const b64 = (typed) => Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength).toString('base64');
