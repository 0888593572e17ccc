/** Operator secrets (admin token, webhook secret, engine key from any source) shorter than this are refused at start. */
export const MIN_SECRET_LENGTH = 16;

/** Why a secret of this length is too short, or null when it is long enough. */
export function tooShort(value: string, what: string, where: string): string | null {
  if (value.length >= MIN_SECRET_LENGTH) return null;
  return `the ${what} in ${where} is ${value.length} characters; operator secrets need at least ${MIN_SECRET_LENGTH} (e.g. \`openssl rand -base64 24\`)`;
}
