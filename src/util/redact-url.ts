/**
 * Credentials a URL may carry, kept out of every output (status branch, admin API, etcd snapshot,
 * logs): a query string (a presigned URL's signature) has its values replaced, and user info
 * (`user:pass@`, which `validate` refuses in model sources anyway) is dropped. Only text that
 * leaves the process is redacted; downloads use the URL as written.
 */

const URL_IN_TEXT = /\b(https?:\/\/)([^\s/?#@'"`]*@)?([^\s?#'"`]*)(\?[^\s#'"`]*)?/gi;

function redactQuery(q: string): string {
  return `?${q
    .slice(1)
    .split('&')
    .map((kv) => {
      const i = kv.indexOf('=');
      return i < 0 ? kv : `${kv.slice(0, i + 1)}REDACTED`;
    })
    .join('&')}`;
}

/** Every http(s) URL in `text` with its query values and user info redacted. */
export function redactUrls(text: string): string {
  if (!text.includes('://')) return text;
  return text.replace(URL_IN_TEXT, (_m, scheme: string, userinfo: string | undefined, rest: string, query: string | undefined) => `${scheme}${userinfo ? 'REDACTED@' : ''}${rest}${query ? redactQuery(query) : ''}`);
}
