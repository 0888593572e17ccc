/** Model sources: normalized so that spelling differences do not change a definition digest. */

/**
 * https://Host:443/a/b.gguf → https://host/a/b.gguf; hf://org/repo/file.gguf kept (an "@main"
 * revision suffix dropped, as it is the default); file:///a//b/./c.gguf → file:///a/b/c.gguf.
 */
export function normalizeSource(source: string): string {
  const s = source.trim();
  if (s.startsWith('hf://')) {
    const rest = s.slice('hf://'.length).replace(/@main$/, '');
    return `hf://${rest.split('/').filter(Boolean).join('/')}`;
  }
  if (s.startsWith('file://')) {
    const parts: string[] = [];
    for (const p of s.slice('file://'.length).split('/')) {
      if (p === '' || p === '.') continue;
      if (p === '..') parts.pop();
      else parts.push(p);
    }
    return `file:///${parts.join('/')}`;
  }
  try {
    const u = new URL(s);
    u.hash = '';
    return u.toString();
  } catch {
    return s;
  }
}
